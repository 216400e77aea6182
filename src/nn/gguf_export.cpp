#include "nn/gguf_export.h"

#include "io/hf_model_config.h"
#include "kernels/rope.h"
#include "spec/spec_error.h"
#include "tokenizer/byte_level.h"

namespace kvlab::nn {
namespace {

std::string tensor_bytes(const torch::Tensor& t, GgmlType type) {
  const torch::ScalarType scalar = type == GgmlType::kF32   ? torch::kFloat32
                                   : type == GgmlType::kF16 ? torch::kFloat16
                                                            : torch::kBFloat16;
  const torch::Tensor c = t.detach().to(torch::kCPU, scalar).contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

void add(GgufWriter& w, const std::string& name, const torch::Tensor& t, GgmlType type) {
  w.add_tensor({name, type, t.sizes().vec(), tensor_bytes(t, type)});
}

uint32_t u32(int64_t v) { return static_cast<uint32_t>(v); }

}  // namespace

torch::Tensor to_adjacent_rope_rows(const torch::Tensor& weight, int64_t n_heads) {
  const int64_t head_dim = weight.size(0) / n_heads;
  // [n, 2, d/2, in] -> [n, d/2, 2, in]: row i of a head's first half, then its partner
  return weight.reshape({n_heads, 2, head_dim / 2, -1}).transpose(1, 2).reshape(weight.sizes());
}

torch::Tensor from_adjacent_rope_rows(const torch::Tensor& weight, int64_t n_heads) {
  const int64_t head_dim = weight.size(0) / n_heads;
  return weight.reshape({n_heads, head_dim / 2, 2, -1}).transpose(1, 2).reshape(weight.sizes());
}

GgufWriter gguf_for(const TransformerModelImpl& model, GgmlType type) {
  const ModelConfig& config = model.config();
  const ModelShape& s = config.shape;
  const std::string hf_arch = hf_architecture_for(config);
  // llama.cpp's name for the architecture; llama rotates adjacent pairs (its RoPE "norm"
  // type), qwen2 and qwen3 rotate halves as Hugging Face and kvlab do ("neox")
  const std::string arch = hf_arch == "LlamaForCausalLM"   ? "llama"
                           : hf_arch == "Qwen2ForCausalLM" ? "qwen2"
                           : hf_arch == "Qwen3ForCausalLM" ? "qwen3"
                                                           : "";
  if (arch.empty()) {
    const std::string why =
        config.attn.variant == AttnVariant::kMla
            ? "MLA maps to llama.cpp's deepseek2, which kvlab does not write yet"
            : "llama.cpp computes only the attention of the models it ships; '" +
                  config.attn.to_string() + "' with these blocks is not one of them";
    throw SpecError("format",
                    "GGUF export writes Llama-style decoders with mha/gqa/mqa (llama, qwen2 with "
                    "q/k/v biases, qwen3 with qknorm) (" +
                        why + "); --format hf writes every variant");
  }
  const bool adjacent_rope = arch == "llama";
  if (s.vocab_size != 256) {
    throw SpecError("format",
                    "GGUF export writes kvlab's byte vocabulary as the tokenizer; this "
                    "model has " +
                        std::to_string(s.vocab_size) + " tokens");
  }
  if (s.rope_scaling.kind == RopeScalingKind::kYarn) {
    throw SpecError("format",
                    "GGUF export does not write yarn RoPE scaling (llama.cpp derives its yarn "
                    "ramp and attention factor its own way); --format hf keeps it exactly");
  }
  if (s.rope_scaling.kind == RopeScalingKind::kLlama3 && arch != "llama") {
    throw SpecError("format", "llama.cpp reads llama3 RoPE scaling (rope_freqs) for llama only");
  }
  const int64_t n_kv = config.attn.n_groups;
  const std::string k = arch + ".";
  GgufWriter w;
  w.add("general.architecture", arch);
  w.add("general.name", "kvlab " + config.attn.to_string());
  w.add("general.alignment", GgufWriter::kAlignment);
  w.add("general.file_type", uint32_t{type == GgmlType::kF32   ? 0u
                                      : type == GgmlType::kF16 ? 1u
                                                               : 32u});
  w.add(k + "vocab_size", u32(s.vocab_size));
  w.add(k + "context_length", u32(s.max_context));
  w.add(k + "embedding_length", u32(s.d_model));
  w.add(k + "block_count", u32(s.n_layers));
  w.add(k + "feed_forward_length", u32(s.mlp_width));
  w.add(k + "attention.head_count", u32(s.n_heads));
  w.add(k + "attention.head_count_kv", u32(n_kv));
  w.add(k + "attention.key_length", u32(s.head_dim));
  w.add(k + "attention.value_length", u32(s.head_dim));
  w.add(k + "rope.dimension_count", u32(s.head_dim));
  w.add(k + "rope.freq_base", static_cast<float>(s.rope_theta));
  w.add(k + "attention.layer_norm_rms_epsilon", static_cast<float>(s.norm_eps));
  if (s.rope_scaling.kind == RopeScalingKind::kLinear) {
    w.add(k + "rope.scaling.type", std::string("linear"));
    w.add(k + "rope.scaling.factor", static_cast<float>(s.rope_scaling.factor));
  }
  const tok::ByteLevelAlphabet alphabet;
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b)
    tokens.push_back(alphabet.encode(std::string(1, static_cast<char>(b))));
  w.add("tokenizer.ggml.model", std::string("gpt2"));
  w.add("tokenizer.ggml.pre", std::string("default"));
  w.add("tokenizer.ggml.tokens", tokens);
  w.add("tokenizer.ggml.token_type", std::vector<int32_t>(256, 1));  // 1: a normal token
  w.add("tokenizer.ggml.merges", std::vector<std::string>{});
  w.add("tokenizer.ggml.add_bos_token", false);

  const auto& trunk = *model.model;
  add(w, "token_embd.weight", trunk.embed_tokens, type);
  if (s.rope_scaling.kind == RopeScalingKind::kLlama3) {
    // llama.cpp divides pair i's frequency by rope_freqs[i] (its convert script writes llama3
    // scaling this way)
    std::vector<float> divisors;
    for (int64_t i = 0; i < s.head_dim / 2; ++i) {
      divisors.push_back(
          static_cast<float>(rope_frequency(i, s.head_dim, s.rope_theta, RopeScaling{}) /
                             rope_frequency(i, s.head_dim, s.rope_theta, s.rope_scaling)));
    }
    add(w, "rope_freqs.weight", torch::tensor(divisors), GgmlType::kF32);
  }
  int64_t i = 0;
  for (const auto& layer : *trunk.layers) {
    const std::string p = "blk." + std::to_string(i++) + ".";
    const auto params = layer->named_parameters();
    const auto at = [&](const std::string& name) { return params[name]; };
    add(w, p + "attn_norm.weight", at("input_layernorm.weight"), GgmlType::kF32);
    const auto rope_rows = [&](const torch::Tensor& t, int64_t heads) {
      return adjacent_rope ? to_adjacent_rope_rows(t, heads) : t;
    };
    add(w, p + "attn_q.weight", rope_rows(at("self_attn.q_proj.weight"), s.n_heads), type);
    add(w, p + "attn_k.weight", rope_rows(at("self_attn.k_proj.weight"), n_kv), type);
    add(w, p + "attn_v.weight", at("self_attn.v_proj.weight"), type);
    if (s.bias == BiasKind::kQkv) {  // qwen2
      add(w, p + "attn_q.bias", at("self_attn.q_proj.bias"), GgmlType::kF32);
      add(w, p + "attn_k.bias", at("self_attn.k_proj.bias"), GgmlType::kF32);
      add(w, p + "attn_v.bias", at("self_attn.v_proj.bias"), GgmlType::kF32);
    }
    if (config.attn.qk_norm) {  // qwen3
      add(w, p + "attn_q_norm.weight", at("self_attn.q_norm.weight"), GgmlType::kF32);
      add(w, p + "attn_k_norm.weight", at("self_attn.k_norm.weight"), GgmlType::kF32);
    }
    add(w, p + "attn_output.weight", at("self_attn.o_proj.weight"), type);
    add(w, p + "ffn_norm.weight", at("post_attention_layernorm.weight"), GgmlType::kF32);
    add(w, p + "ffn_gate.weight", at("mlp.gate_proj.weight"), type);
    add(w, p + "ffn_up.weight", at("mlp.up_proj.weight"), type);
    add(w, p + "ffn_down.weight", at("mlp.down_proj.weight"), type);
  }
  add(w, "output_norm.weight", trunk.norm->weight, GgmlType::kF32);
  if (!s.tied_embeddings) add(w, "output.weight", model.lm_head->weight, type);
  return w;
}

}  // namespace kvlab::nn
