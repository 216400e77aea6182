#include "spec/presets.h"

#include "spec/spec_error.h"

namespace kvlab {
namespace {

// The seeds' GPT-style language models (seed 003 §4.3, A.5).
ModelShape paper_gpt(int64_t n_layers, int64_t d_model, int64_t n_heads, int64_t mlp_width) {
  ModelShape s = ModelShape::gpt_decoder(n_layers, d_model, n_heads, /*vocab_size=*/50304,
                                         /*max_context=*/2048);
  s.head_dim = 64;
  s.mlp_width = mlp_width;
  return s;
}

// Llama-family decoders: RMSNorm, SwiGLU, RoPE, untied embeddings.
ModelShape llama_like(int64_t n_layers, int64_t d_model, int64_t n_heads, int64_t head_dim,
                      int64_t mlp_width, int64_t vocab_size, int64_t max_context,
                      double rope_theta) {
  ModelShape s = ModelShape::llama_decoder(n_layers, d_model, n_heads, mlp_width, vocab_size,
                                           max_context, rope_theta);
  s.head_dim = head_dim;
  return s;
}

ModelShape deepseek(int64_t n_layers, int64_t d_model, int64_t n_heads, int64_t mlp_width,
                    MoeShape moe, int64_t vocab_size) {
  ModelShape s = llama_like(n_layers, d_model, n_heads, /*head_dim=*/128, mlp_width, vocab_size,
                            /*max_context=*/163840, /*rope_theta=*/10000.0);
  s.moe = moe;
  return s;
}

std::vector<Preset> make_presets() {
  std::vector<Preset> out;
  out.push_back({"paper-300m", "seed 003's 300M GPT", paper_gpt(20, 1024, 16, 4096), "mha", ""});
  out.push_back({"paper-1.2b", "seed 003's 1.2B GPT", paper_gpt(22, 2048, 32, 8192), "mha", ""});
  out.push_back({"llama-3-8b", "Meta Llama 3 8B",
                 llama_like(32, 4096, 32, 128, 14336, 128256, 8192, 500000.0), "gqa:8", ""});
  out.push_back({"llama-3-70b", "Meta Llama 3 70B",
                 llama_like(80, 8192, 64, 128, 28672, 128256, 8192, 500000.0), "gqa:8", ""});
  out.push_back({"mistral-7b", "Mistral 7B v0.1",
                 llama_like(32, 4096, 32, 128, 14336, 32000, 32768, 10000.0), "gqa:8", ""});
  {
    ModelShape qwen = llama_like(28, 3584, 28, 128, 18944, 152064, 131072, 1000000.0);
    qwen.bias = BiasKind::kQkv;
    out.push_back({"qwen2.5-7b", "Qwen2.5 7B (biases on q/k/v)", qwen, "gqa:4", ""});
  }
  out.push_back({"deepseek-v2", "DeepSeek-V2 (236B MoE, MLA)",
                 deepseek(60, 5120, 128, 12288,
                          MoeShape{/*routed=*/160, /*shared=*/2, /*per_token=*/6,
                                   /*expert_mlp_width=*/1536, /*dense_layers=*/1},
                          102400),
                 "mla:dc=512,dr=64,dq=1536", ""});
  out.push_back({"deepseek-v2-lite", "DeepSeek-V2-Lite (16B MoE, MLA, full-rank query)",
                 deepseek(27, 2048, 16, 10944,
                          MoeShape{/*routed=*/64, /*shared=*/2, /*per_token=*/6,
                                   /*expert_mlp_width=*/1408, /*dense_layers=*/1},
                          102400),
                 "mla:dc=512,dr=64", ""});
  out.push_back({"deepseek-v3", "DeepSeek-V3 (671B MoE, MLA)",
                 deepseek(61, 7168, 128, 18432,
                          MoeShape{/*routed=*/256, /*shared=*/1, /*per_token=*/8,
                                   /*expert_mlp_width=*/2048, /*dense_layers=*/3},
                          129280),
                 "mla:dc=512,dr=64,dq=1536",
                 "the multi-token-prediction module and router score biases are not counted"});
  {
    // The released shared-KV GVA ablation: K = RoPE(C), V = C, 8 groups of 90.
    ModelShape lumma = llama_like(30, 1440, 16, 90, /*mlp_width=*/3840, /*vocab_size=*/32000,
                                  /*max_context=*/4096, 10000.0);
    lumma.tied_embeddings = true;
    out.push_back({"lumma-0.6b", "FrontiersMind Lumma-0.6B-Base (shared K=V with RoPE)", lumma,
                   "q-gqa:8",
                   "MLP width, vocabulary, context and tying are placeholders (not in kvlab's "
                   "sources): cache numbers are exact, parameter totals are not the real model's"});
  }
  return out;
}

}  // namespace

const std::vector<Preset>& presets() {
  static const std::vector<Preset> all = make_presets();
  return all;
}

const Preset& find_preset(std::string_view name) {
  std::string known;
  for (const Preset& p : presets()) {
    if (p.name == name) return p;
    known += (known.empty() ? "" : ", ") + p.name;
  }
  throw SpecError("model",
                  "unknown model preset '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace kvlab
