#include "io/hf_config.h"

#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "io/hf_fields.h"
#include "io/hf_gpt2_config.h"
#include "io/json_document.h"
#include "spec/spec_error.h"

namespace kvlab {
namespace {

using nlohmann::json;
using namespace hf_fields;

// rope_theta sits at the top level (older configs) or inside rope_parameters (newer).
double read_rope_theta(const json& config) {
  const bool top = present(config, "rope_theta");
  const bool nested = present(config, "rope_parameters") &&
                      config.at("rope_parameters").is_object() &&
                      present(config.at("rope_parameters"), "rope_theta");
  const double top_value = top ? positive_number(config.at("rope_theta"), "rope_theta") : 0;
  const double nested_value = nested
                                  ? positive_number(config.at("rope_parameters").at("rope_theta"),
                                                    "rope_parameters.rope_theta")
                                  : 0;
  if (top && nested && top_value != nested_value) {
    throw SpecError("rope_theta", json(top_value).dump() +
                                      " at the top level contradicts "
                                      "rope_parameters.rope_theta " +
                                      json(nested_value).dump());
  }
  if (top) return top_value;
  if (nested) return nested_value;
  return 10000.0;
}

std::string model_type(const json& config) {
  if (!present(config, "model_type")) return "unknown";
  if (!config.at("model_type").is_string()) {
    throw SpecError("model_type",
                    "expected a string, got " + json_excerpt(config.at("model_type")));
  }
  return config.at("model_type").get<std::string>();
}

}  // namespace

Preset parse_hf_config(std::string_view json_text, const std::string& source) {
  return hf_preset(parse_json_document(json_text, source, "hf-config"), source);
}

Preset hf_preset(const json& config, const std::string& source) {
  if (!config.is_object()) throw SpecError("hf-config", source + " holds no JSON object");

  const std::string type = model_type(config);
  if (type == "gpt2") return gpt2_preset(config, source);
  ModelShape s;
  s.kind = ModelKind::kDecoder;
  s.d_model = positive_int(config, "hidden_size");
  s.n_layers = positive_int(config, "num_hidden_layers");
  s.n_heads = positive_int(config, "num_attention_heads");
  s.mlp_width = positive_int(config, "intermediate_size");
  s.vocab_size = positive_int(config, "vocab_size");
  s.max_context = positive_int_or(config, "max_position_embeddings", 0);
  // Every family read here uses a gated SiLU MLP, RMSNorm and RoPE.
  s.mlp_kind = MlpKind::kSwiglu;
  s.norm = NormKind::kRmsNorm;
  s.pos = PosScheme::kRope;
  s.rope_theta = read_rope_theta(config);
  // transformers' Llama, Mistral, Qwen2 and DeepSeek configs default to untied.
  s.tied_embeddings = bool_or(config, "tie_word_embeddings", false);

  const bool attention_bias = bool_or(config, "attention_bias", false);
  const bool mlp_bias = bool_or(config, "mlp_bias", false);
  if (type == "qwen2" || (attention_bias && !mlp_bias)) {
    // Qwen2 hard-wires q/k/v biases; Llama's attention_bias also biases o_proj, which
    // kvlab's "qkv" bias kind does not count.
    if (type != "qwen2") {
      throw SpecError("attention_bias",
                      "attention_bias=true with mlp_bias=false (biases on "
                      "q/k/v/o only) is not a bias layout kvlab counts "
                      "(none, q/k/v only, or every linear layer)");
    }
    s.bias = BiasKind::kQkv;
  } else {
    s.bias = attention_bias ? BiasKind::kAll : BiasKind::kNone;
  }

  std::string attn;
  if (present(config, "kv_lora_rank")) {
    // DeepSeek MLA: the latent and rope widths define the cache; num_key_value_heads and
    // head_dim in these configs describe the expanded heads and are not used.
    const int64_t latent = positive_int(config, "kv_lora_rank");
    const int64_t rope = positive_int(config, "qk_rope_head_dim");
    const int64_t nope = positive_int(config, "qk_nope_head_dim");
    const int64_t value = positive_int(config, "v_head_dim");
    const int64_t q_latent = positive_int_or(config, "q_lora_rank", 0);
    s.head_dim = nope;
    attn = "mla:dc=" + std::to_string(latent) + ",dr=" + std::to_string(rope) +
           ",dn=" + std::to_string(nope) + ",dv=" + std::to_string(value);
    if (q_latent > 0) attn += ",dq=" + std::to_string(q_latent);
  } else {
    const int64_t kv_heads = positive_int_or(config, "num_key_value_heads", s.n_heads);
    if (kv_heads > s.n_heads || s.n_heads % kv_heads != 0) {
      throw SpecError("num_key_value_heads",
                      std::to_string(s.n_heads) + " attention heads cannot share " +
                          std::to_string(kv_heads) +
                          " key/value heads (num_attention_heads must be a multiple)");
    }
    if (present(config, "head_dim")) {
      s.head_dim = positive_int(config, "head_dim");
    } else if (s.d_model % s.n_heads == 0) {
      s.head_dim = s.d_model / s.n_heads;
    } else {
      throw SpecError("head_dim", "missing, and hidden_size " + std::to_string(s.d_model) +
                                      " is not a multiple of num_attention_heads " +
                                      std::to_string(s.n_heads));
    }
    attn = kv_heads == s.n_heads ? "mha"
           : kv_heads == 1       ? "mqa"
                                 : "gqa:" + std::to_string(kv_heads);
    if (type == "qwen3") attn += ",qknorm";  // per-head q_norm / k_norm
  }

  if (present(config, "n_routed_experts")) {
    s.moe.n_routed_experts = positive_int(config, "n_routed_experts");
    s.moe.n_shared_experts = non_negative_int_or(config, "n_shared_experts", 0);
    s.moe.experts_per_token = positive_int(config, "num_experts_per_tok");
    s.moe.expert_mlp_width = positive_int(config, "moe_intermediate_size");
    s.moe.n_dense_layers = non_negative_int_or(config, "first_k_dense_replace", 0);
    s.moe.score_correction = type == "deepseek_v3";  // the router's e_score_correction_bias
    if (positive_int_or(config, "moe_layer_freq", 1) != 1) {
      throw SpecError("moe_layer_freq", "only 1 (every layer after the dense ones) is supported");
    }
  }

  Preset preset;
  preset.name = source;
  preset.description = "Hugging Face config (model_type " + type + ")";
  preset.shape = s;
  preset.attn = attn;
  s.validate();
  return preset;
}

Preset read_hf_config(const std::string& path) {
  std::string text;
  try {
    text = read_file(path, kMaxConfigBytes);
  } catch (const std::runtime_error& e) {
    throw SpecError("hf-config", e.what());
  }
  return parse_hf_config(text, path);
}

}  // namespace kvlab
