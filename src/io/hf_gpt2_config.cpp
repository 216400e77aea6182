#include "io/hf_gpt2_config.h"

#include <algorithm>
#include <array>
#include <string_view>

#include "io/hf_fields.h"
#include "io/json_document.h"
#include "spec/spec_error.h"

namespace kvlab {
namespace {

using nlohmann::json;
using namespace hf_fields;

// Fields of GPT2Config that kvlab applies or checks.
constexpr std::array<std::string_view, 16> kGpt2Applied = {"architectures",
                                                           "model_type",
                                                           "vocab_size",
                                                           "n_positions",
                                                           "n_embd",
                                                           "n_layer",
                                                           "n_head",
                                                           "n_inner",
                                                           "activation_function",
                                                           "layer_norm_epsilon",
                                                           "tie_word_embeddings",
                                                           "scale_attn_weights",
                                                           "scale_attn_by_inverse_layer_idx",
                                                           "add_cross_attention",
                                                           "reorder_and_upcast_attn",
                                                           "kvlab"};
// GPT-2's own fields that do not change what the model computes at inference (beside
// is_inert_hf_field's): dropout, the sequence-summary head of GPT2DoubleHeadsModel, generation
// settings, n_ctx (GPT-2's original name for n_positions, which transformers no longer reads).
constexpr std::array<std::string_view, 11> kGpt2Inert = {"resid_pdrop",
                                                         "embd_pdrop",
                                                         "attn_pdrop",
                                                         "summary_type",
                                                         "summary_use_proj",
                                                         "summary_activation",
                                                         "summary_proj_to_labels",
                                                         "summary_first_dropout",
                                                         "task_specific_params",
                                                         "n_ctx",
                                                         "output_past"};

MlpKind activation_of(const json& config) {
  const std::string name = string_or(config, "activation_function", "gelu_new");
  // transformers' ACT2FN: gelu = x·Φ(x); gelu_new and gelu_pytorch_tanh = the tanh form
  if (name == "gelu") return MlpKind::kGelu;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh") return MlpKind::kGeluTanh;
  throw SpecError("activation_function", "'" + name +
                                             "' is not implemented (kvlab runs gelu, gelu_new, "
                                             "gelu_pytorch_tanh)");
}

}  // namespace

Preset gpt2_preset(const json& config, const std::string& source) {
  ModelShape s;
  s.kind = ModelKind::kDecoder;
  s.d_model = positive_int(config, "n_embd");
  s.n_layers = positive_int(config, "n_layer");
  s.n_heads = positive_int(config, "n_head");
  s.vocab_size = positive_int(config, "vocab_size");
  s.max_context = positive_int(config, "n_positions");
  if (s.d_model % s.n_heads != 0) {
    throw SpecError("n_head", "n_embd " + std::to_string(s.d_model) + " is not a multiple of " +
                                  std::to_string(s.n_heads) + " heads");
  }
  s.head_dim = s.d_model / s.n_heads;
  s.mlp_width = positive_int_or(config, "n_inner", 4 * s.d_model);
  s.mlp_kind = activation_of(config);
  s.norm = NormKind::kLayerNorm;
  s.bias = BiasKind::kAll;
  s.pos = PosScheme::kLearned;
  s.tied_embeddings = bool_or(config, "tie_word_embeddings", true);  // GPT-2 ties by default
  if (present(config, "layer_norm_epsilon")) {
    s.norm_eps = positive_number(config.at("layer_norm_epsilon"), "layer_norm_epsilon");
  }
  s.validate();
  Preset preset;
  preset.name = source;
  preset.description = "Hugging Face config (model_type gpt2)";
  preset.shape = s;
  preset.attn = "mha";
  return preset;
}

ModelConfig gpt2_model_config(const json& config, const std::string& source) {
  for (const auto& [key, value] : config.items()) {
    if (std::find(kGpt2Applied.begin(), kGpt2Applied.end(), key) == kGpt2Applied.end() &&
        std::find(kGpt2Inert.begin(), kGpt2Inert.end(), key) == kGpt2Inert.end() &&
        !is_inert_hf_field(key)) {
      throw SpecError(key,
                      "is not a field kvlab understands for GPT2LMHeadModel (an unknown field "
                      "could change the model; remove it if it does not)");
    }
  }
  if (string_or(config, "model_type", "") != "gpt2") {
    throw SpecError("model_type", "expected \"gpt2\" for GPT2LMHeadModel, got " +
                                      json_excerpt(config.value("model_type", json())));
  }
  if (!bool_or(config, "scale_attn_weights", true)) {
    throw SpecError("scale_attn_weights", "false (unscaled scores) is not implemented");
  }
  if (bool_or(config, "scale_attn_by_inverse_layer_idx", false)) {
    throw SpecError("scale_attn_by_inverse_layer_idx",
                    "true (scores scaled by 1/(layer+1)) is not implemented");
  }
  if (bool_or(config, "add_cross_attention", false)) {
    throw SpecError("add_cross_attention",
                    "true: an encoder-decoder GPT-2 is not a model kvlab runs");
  }
  bool_or(config, "reorder_and_upcast_attn", false);  // f32 scores either way: type check only
  const Preset preset = gpt2_preset(config, source);
  DType cache_dtype = DType::kBf16;
  if (present(config, "kvlab")) {
    const json& block = config.at("kvlab");
    if (!block.is_object() || !block.contains("cache_dtype") ||
        !block.at("cache_dtype").is_string()) {
      throw SpecError("kvlab.cache_dtype", "missing (required in a kvlab block)");
    }
    cache_dtype = parse_dtype(block.at("cache_dtype").get<std::string>());
  }
  return ModelConfig::make(preset.shape, preset.attn, cache_dtype);
}

bool has_gpt2_blocks(const ModelConfig& config) {
  const ModelShape& s = config.shape;
  const AttentionSpec& a = config.attn;
  return s.kind == ModelKind::kDecoder && s.norm == NormKind::kLayerNorm &&
         (s.mlp_kind == MlpKind::kGelu || s.mlp_kind == MlpKind::kGeluTanh) &&
         s.bias == BiasKind::kAll && s.pos == PosScheme::kLearned && !s.moe.enabled() &&
         s.head_dim * s.n_heads == s.d_model && a.variant == AttnVariant::kMha && !a.qk_norm;
}

json gpt2_config_for(const ModelConfig& config, const json& kvlab_block) {
  const ModelShape& s = config.shape;
  return {{"architectures", {"GPT2LMHeadModel"}},
          {"model_type", "gpt2"},
          {"vocab_size", s.vocab_size},
          {"n_positions", s.max_context},
          {"n_embd", s.d_model},
          {"n_layer", s.n_layers},
          {"n_head", s.n_heads},
          {"n_inner", s.mlp_width},
          {"activation_function", s.mlp_kind == MlpKind::kGelu ? "gelu" : "gelu_new"},
          {"layer_norm_epsilon", s.norm_eps},
          {"tie_word_embeddings", s.tied_embeddings},
          {"scale_attn_weights", true},
          {"resid_pdrop", 0.0},
          {"embd_pdrop", 0.0},
          {"attn_pdrop", 0.0},
          {"torch_dtype", "float32"},
          {"kvlab", kvlab_block}};
}

}  // namespace kvlab
