#include "nn/gguf_export.h"

#include "io/hf_model_config.h"
#include "kernels/convert.h"
#include "kernels/rope.h"
#include "nn/hf_tensor_layout.h"
#include "spec/spec_error.h"
#include "tokenizer/byte_level.h"

namespace kvlab::nn {
namespace {

std::string tensor_bytes(const torch::Tensor& t, GgmlType type) {
  if (const std::optional<DType> block = ggml_block_dtype(type)) {
    // rows of the innermost dimension, quantized as the cache does
    const DType dtype = *block;
    const torch::Tensor c = t.detach().to(torch::kCPU, torch::kFloat32).contiguous();
    const int64_t width = c.size(-1), rows = c.numel() / width;
    std::string bytes(static_cast<size_t>(rows * row_bytes(dtype, width)), '\0');
    store_rows(c.data_ptr<float>(), rows, width, dtype, bytes.data());
    return bytes;
  }
  const torch::ScalarType scalar = type == GgmlType::kF32   ? torch::kFloat32
                                   : type == GgmlType::kF16 ? torch::kFloat16
                                                            : torch::kBFloat16;
  const torch::Tensor c = t.detach().to(torch::kCPU, scalar).contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

// A matrix in `type`; under q8_0 or q4_0 one whose rows are not whole blocks (or a vector) is
// written f16, as llama.cpp's converter falls back.
void add(GgufWriter& w, const std::string& name, const torch::Tensor& t, GgmlType type) {
  if (ggml_block_dtype(type) && (t.dim() < 2 || t.size(-1) % kQuantBlockElements != 0)) {
    type = GgmlType::kF16;
  }
  w.add_tensor({name, type, t.sizes().vec(), tensor_bytes(t, type)});
}

uint32_t u32(int64_t v) { return static_cast<uint32_t>(v); }

// DeepSeek-V2's attention as llama.cpp's deepseek2 reads it: the RoPE rows of the query and of
// kv_a_proj_with_mqa in DeepSeek's interleaved order (what the Hugging Face export writes), and
// kv_b_proj split per head into k_b, transposed to [H, d_c, d_n], and v_b [H, d_v, d_c]
// (convert_hf_to_gguf.py's split for the absorbed form).
void add_deepseek2_attention(GgufWriter& w, const std::string& p,
                             const torch::OrderedDict<std::string, torch::Tensor>& params,
                             const ModelConfig& config, GgmlType type) {
  const AttentionSpec& a = config.attn;
  const auto interleaved = [&](const std::string& name) {
    const NamedTensors one = {{name, params[name]}};
    return to_hf_layout(one, config, HfTensorLayout::kDeepseekRope).at(name);
  };
  if (a.q_latent_dim > 0) {
    add(w, p + "attn_q_a.weight", params["self_attn.q_a_proj.weight"], type);
    add(w, p + "attn_q_a_norm.weight", params["self_attn.q_a_layernorm.weight"], GgmlType::kF32);
    add(w, p + "attn_q_b.weight", interleaved("self_attn.q_b_proj.weight"), type);
  } else {
    add(w, p + "attn_q.weight", interleaved("self_attn.q_proj.weight"), type);
  }
  add(w, p + "attn_kv_a_mqa.weight", interleaved("self_attn.kv_a_proj_with_mqa.weight"), type);
  add(w, p + "attn_kv_a_norm.weight", params["self_attn.kv_a_layernorm.weight"], GgmlType::kF32);
  const torch::Tensor kv_b = params["self_attn.kv_b_proj.weight"].view(
      {config.shape.n_heads, a.nope_dim + a.value_dim, a.latent_dim});  // [H, d_n + d_v, d_c]
  add(w, p + "attn_k_b.weight", kv_b.narrow(1, 0, a.nope_dim).transpose(1, 2), type);
  add(w, p + "attn_v_b.weight", kv_b.narrow(1, a.nope_dim, a.value_dim), type);
}

// A DeepSeek mixture of experts as llama.cpp reads it: the router (ffn_gate_inp; V3's
// correction bias as exp_probs_b.bias), each projection of the routed experts stacked into one
// [E, out, in] tensor (ffn_{gate,up,down}_exps), the shared experts as one MLP (_shexp).
void add_deepseek2_experts(GgufWriter& w, const std::string& p,
                           const torch::OrderedDict<std::string, torch::Tensor>& params,
                           const MoeShape& moe, GgmlType type) {
  add(w, p + "ffn_gate_inp.weight", params["mlp.gate.weight"], GgmlType::kF32);
  if (moe.score_correction) {
    add(w, p + "exp_probs_b.bias", params["mlp.gate.e_score_correction_bias"], GgmlType::kF32);
  }
  for (const char* proj : {"gate", "up", "down"}) {
    std::vector<torch::Tensor> experts;
    for (int64_t e = 0; e < moe.n_routed_experts; ++e) {
      experts.push_back(params["mlp.experts." + std::to_string(e) + "." + proj + "_proj.weight"]);
    }
    add(w, p + "ffn_" + proj + "_exps.weight", torch::stack(experts), type);
  }
  if (moe.n_shared_experts > 0) {
    for (const char* proj : {"gate", "up", "down"}) {
      add(w, p + "ffn_" + proj + "_shexp.weight",
          params[std::string("mlp.shared_experts.") + proj + "_proj.weight"], type);
    }
  }
}

// What every architecture's file starts with: general.*, and the shape's keys under the
// architecture's name.
GgufWriter gguf_header(const ModelConfig& config, const std::string& arch, GgmlType type) {
  const ModelShape& s = config.shape;
  const std::string k = arch + ".";
  GgufWriter w;
  w.add("general.architecture", arch);
  w.add("general.name", "kvlab " + config.attn.to_string());
  w.add("general.alignment", GgufWriter::kAlignment);
  // llama.cpp's LLAMA_FTYPE: ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q4_0 2, MOSTLY_Q8_0 7, MOSTLY_BF16 32
  w.add("general.file_type", uint32_t{type == GgmlType::kF32    ? 0u
                                      : type == GgmlType::kF16  ? 1u
                                      : type == GgmlType::kQ4_0 ? 2u
                                      : type == GgmlType::kQ8_0 ? 7u
                                                                : 32u});
  w.add(k + "vocab_size", u32(s.vocab_size));
  w.add(k + "context_length", u32(s.max_context));
  w.add(k + "embedding_length", u32(s.d_model));
  w.add(k + "block_count", u32(s.n_layers));
  w.add(k + "feed_forward_length", u32(s.mlp_width));
  w.add(k + "attention.head_count", u32(s.n_heads));
  return w;
}

// kvlab's byte vocabulary as a "gpt2" BPE: the 256 byte characters, no merges.
void add_byte_tokenizer(GgufWriter& w) {
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
}

// GPT-2 blocks as llama.cpp's gpt2 reads them: learned positions (position_embd), LayerNorms
// with biases, q/k/v fused into attn_qkv ([3·D, D], rows q then k then v), biases on every
// projection, GELU's tanh form (ggml_gelu), the head tied to the embedding unless output.weight
// is present.
GgufWriter gpt2_gguf(const TransformerModelImpl& model, GgmlType type) {
  const ModelConfig& config = model.config();
  const ModelShape& s = config.shape;
  if (s.mlp_kind != MlpKind::kGeluTanh) {
    throw SpecError("format",
                    "llama.cpp's gpt2 computes GELU's tanh form; this model's MLP uses the exact "
                    "GELU (--mlp-kind gelu), which llama.cpp would compute differently; --format "
                    "hf writes it as GPT2LMHeadModel (activation_function \"gelu\")");
  }
  GgufWriter w = gguf_header(config, "gpt2", type);
  w.add("gpt2.attention.layer_norm_epsilon", static_cast<float>(s.norm_eps));
  add_byte_tokenizer(w);
  const auto& trunk = *model.model;
  add(w, "token_embd.weight", trunk.embed_tokens, type);
  add(w, "position_embd.weight", trunk.embed_positions, type);
  int64_t i = 0;
  for (const auto& layer : *trunk.layers) {
    const std::string p = "blk." + std::to_string(i++) + ".";
    const auto params = layer->named_parameters();
    const auto at = [&](const std::string& name) { return params[name]; };
    const auto fused = [&](const char* part) {
      return torch::cat({at(std::string("self_attn.q_proj.") + part),
                         at(std::string("self_attn.k_proj.") + part),
                         at(std::string("self_attn.v_proj.") + part)});
    };
    add(w, p + "attn_norm.weight", at("input_layernorm.weight"), GgmlType::kF32);
    add(w, p + "attn_norm.bias", at("input_layernorm.bias"), GgmlType::kF32);
    add(w, p + "attn_qkv.weight", fused("weight"), type);
    add(w, p + "attn_qkv.bias", fused("bias"), GgmlType::kF32);
    add(w, p + "attn_output.weight", at("self_attn.o_proj.weight"), type);
    add(w, p + "attn_output.bias", at("self_attn.o_proj.bias"), GgmlType::kF32);
    add(w, p + "ffn_norm.weight", at("post_attention_layernorm.weight"), GgmlType::kF32);
    add(w, p + "ffn_norm.bias", at("post_attention_layernorm.bias"), GgmlType::kF32);
    add(w, p + "ffn_up.weight", at("mlp.up_proj.weight"), type);
    add(w, p + "ffn_up.bias", at("mlp.up_proj.bias"), GgmlType::kF32);
    add(w, p + "ffn_down.weight", at("mlp.down_proj.weight"), type);
    add(w, p + "ffn_down.bias", at("mlp.down_proj.bias"), GgmlType::kF32);
  }
  add(w, "output_norm.weight", trunk.norm->weight, GgmlType::kF32);
  add(w, "output_norm.bias", trunk.norm->bias, GgmlType::kF32);
  if (!s.tied_embeddings) add(w, "output.weight", model.lm_head->weight, type);
  return w;
}

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
  if (s.vocab_size != 256) {
    throw SpecError("format",
                    "GGUF export writes kvlab's byte vocabulary as the tokenizer; this "
                    "model has " +
                        std::to_string(s.vocab_size) + " tokens");
  }
  if (hf_arch == "GPT2LMHeadModel") return gpt2_gguf(model, type);
  // llama.cpp's name for the architecture; llama and deepseek2 rotate adjacent pairs (its RoPE
  // "norm" type), qwen2 and qwen3 rotate halves as Hugging Face and kvlab do ("neox")
  const std::string arch = hf_arch == "LlamaForCausalLM"        ? "llama"
                           : hf_arch == "Qwen2ForCausalLM"      ? "qwen2"
                           : hf_arch == "Qwen3ForCausalLM"      ? "qwen3"
                           : hf_arch == "DeepseekV2ForCausalLM" ? "deepseek2"
                           : hf_arch == "DeepseekV3ForCausalLM" ? "deepseek2"
                                                                : "";
  if (arch.empty()) {
    const std::string why =
        config.attn.variant == AttnVariant::kMla
            ? "this mla model is not one DeepseekV2ForCausalLM describes"
            : "llama.cpp computes only the attention of the models it ships; '" +
                  config.attn.to_string() + "' with these blocks is not one of them";
    throw SpecError("format",
                    "GGUF export writes Llama-style decoders with mha/gqa/mqa (llama, qwen2 with "
                    "q/k/v biases, qwen3 with qknorm), DeepSeek-style mla (deepseek2) and GPT-2 "
                    "blocks with mha (gpt2) (" +
                        why + "); --format hf writes every variant");
  }
  // llama.cpp tells a query without LoRA (DeepSeek-V2-Lite's) from one with it by the layer
  // count alone: 26 or 27 layers read attn_q, any other count attn_q_a/attn_q_b
  const bool lite_layer_count = s.n_layers == 26 || s.n_layers == 27;
  if (arch == "deepseek2" && (config.attn.q_latent_dim > 0) == lite_layer_count) {
    throw SpecError("format",
                    std::string("llama.cpp's deepseek2 reads a query ") +
                        (lite_layer_count ? "without" : "with") +
                        " LoRA at this layer count (it expects q LoRA unless the model has 26 or "
                        "27 layers, as DeepSeek-V2-Lite); this model has " +
                        std::to_string(s.n_layers) + " layers and " +
                        (lite_layer_count ? "a q LoRA (dq)" : "no q LoRA (dq)") +
                        "; --format hf writes it");
  }
  if (arch == "deepseek2" && s.moe.n_expert_groups > 1 &&
      s.moe.group_score != MoeGroupScore::kTopTwoSum) {
    throw SpecError(
        "format",
        "llama.cpp ranks expert groups by the sum of their two best scores "
        "(DeepSeek-V3); this model's router ranks them by their best one (DeepSeek-V2's "
        "group_limited_greedy), which llama.cpp would route differently; --format hf "
        "writes it");
  }
  const bool adjacent_rope = arch == "llama";
  const bool deepseek = arch == "deepseek2";
  if (s.rope_scaling.kind == RopeScalingKind::kYarn) {
    throw SpecError("format",
                    "GGUF export does not write yarn RoPE scaling (llama.cpp derives its yarn "
                    "ramp and attention factor its own way); --format hf keeps it exactly");
  }
  if (s.rope_scaling.kind == RopeScalingKind::kLlama3 && arch != "llama") {
    throw SpecError("format", "llama.cpp reads llama3 RoPE scaling (rope_freqs) for llama only");
  }
  // deepseek2: MLA runs in llama.cpp as one key/value head of the latent (+ RoPE) width
  const int64_t n_kv = deepseek ? 1 : config.attn.n_groups;
  const AttentionSpec& a = config.attn;
  const std::string k = arch + ".";
  GgufWriter w = gguf_header(config, arch, type);
  w.add(k + "attention.head_count_kv", u32(n_kv));
  if (deepseek) {  // the keys convert_hf_to_gguf.py writes for DeepseekV2ForCausalLM
    const MoeShape& m = s.moe;
    w.add(k + "leading_dense_block_count", u32(m.enabled() ? m.n_dense_layers : s.n_layers));
    if (a.q_latent_dim > 0) w.add(k + "attention.q_lora_rank", u32(a.q_latent_dim));
    w.add(k + "attention.kv_lora_rank", u32(a.latent_dim));
    w.add(k + "attention.key_length", u32(a.latent_dim + a.rope_dim));
    w.add(k + "attention.value_length", u32(a.latent_dim));
    w.add(k + "attention.key_length_mla", u32(a.nope_dim + a.rope_dim));
    w.add(k + "attention.value_length_mla", u32(a.value_dim));
    w.add(k + "expert_feed_forward_length", u32(m.enabled() ? m.expert_mlp_width : s.mlp_width));
    w.add(k + "expert_shared_count", u32(m.n_shared_experts));
    if (m.enabled()) {
      w.add(k + "expert_count", u32(m.n_routed_experts));
      w.add(k + "expert_used_count", u32(m.experts_per_token));
      w.add(k + "expert_weights_scale", static_cast<float>(m.routed_scale));
      w.add(k + "expert_weights_norm", m.normalize_top_k);
      // llama.cpp's llama_expert_gating_func_type: 1 softmax (V2), 2 sigmoid (V3)
      w.add(k + "expert_gating_func", uint32_t{m.scoring == MoeScoring::kSigmoid ? 2u : 1u});
      if (m.n_expert_groups > 1) {
        w.add(k + "expert_group_count", u32(m.n_expert_groups));
        w.add(k + "expert_group_used_count", u32(m.groups_per_token));
      }
    }
    w.add(k + "rope.dimension_count", u32(a.rope_dim));
  } else {
    w.add(k + "attention.key_length", u32(s.head_dim));
    w.add(k + "attention.value_length", u32(s.head_dim));
    w.add(k + "rope.dimension_count", u32(s.head_dim));
  }
  w.add(k + "rope.freq_base", static_cast<float>(s.rope_theta));
  w.add(k + "attention.layer_norm_rms_epsilon", static_cast<float>(s.norm_eps));
  if (s.rope_scaling.kind == RopeScalingKind::kLinear) {
    w.add(k + "rope.scaling.type", std::string("linear"));
    w.add(k + "rope.scaling.factor", static_cast<float>(s.rope_scaling.factor));
  }
  add_byte_tokenizer(w);

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
    if (deepseek) {
      add_deepseek2_attention(w, p, params, config, type);
    } else {
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
    }
    add(w, p + "attn_output.weight", at("self_attn.o_proj.weight"), type);
    add(w, p + "ffn_norm.weight", at("post_attention_layernorm.weight"), GgmlType::kF32);
    if (params.contains("mlp.gate.weight")) {
      add_deepseek2_experts(w, p, params, s.moe, type);
    } else {
      add(w, p + "ffn_gate.weight", at("mlp.gate_proj.weight"), type);
      add(w, p + "ffn_up.weight", at("mlp.up_proj.weight"), type);
      add(w, p + "ffn_down.weight", at("mlp.down_proj.weight"), type);
    }
  }
  add(w, "output_norm.weight", trunk.norm->weight, GgmlType::kF32);
  if (!s.tied_embeddings) add(w, "output.weight", model.lm_head->weight, type);
  return w;
}

}  // namespace kvlab::nn
