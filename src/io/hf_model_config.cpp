#include "io/hf_model_config.h"

#include <algorithm>
#include <array>
#include <string_view>

#include "io/hf_config.h"
#include "io/json_document.h"
#include "io/model_config_json.h"
#include "spec/spec_error.h"
#include "spec/version.h"

namespace kvlab {
namespace {

using nlohmann::json;

struct Architecture {
  std::string_view name;
  std::string_view model_type;
};

constexpr std::array<Architecture, 3> kLlamaFamily = {{
    {"LlamaForCausalLM", "llama"},
    {"MistralForCausalLM", "mistral"},
    {"Qwen2ForCausalLM", "qwen2"},
}};
constexpr std::string_view kKvlabArchitecture = "KvlabForCausalLM";

// Architectures people will bring that kvlab does not load yet, with what is missing.
constexpr std::array<std::pair<std::string_view, std::string_view>, 3> kNotYet = {{
    {"Qwen3ForCausalLM", "its per-head q_norm / k_norm"},
    {"DeepseekV2ForCausalLM", "DeepSeek's MoE routing and MLA weight layout"},
    {"DeepseekV3ForCausalLM", "DeepSeek's MoE routing and MLA weight layout"},
}};

// Fields of a Llama-family config.json that kvlab applies.
constexpr std::array<std::string_view, 24> kApplied = {"architectures",
                                                       "model_type",
                                                       "hidden_size",
                                                       "num_hidden_layers",
                                                       "num_attention_heads",
                                                       "num_key_value_heads",
                                                       "head_dim",
                                                       "intermediate_size",
                                                       "vocab_size",
                                                       "max_position_embeddings",
                                                       "rms_norm_eps",
                                                       "rope_theta",
                                                       "rope_parameters",
                                                       "rope_scaling",
                                                       "tie_word_embeddings",
                                                       "attention_bias",
                                                       "mlp_bias",
                                                       "hidden_act",
                                                       "pretraining_tp",
                                                       "sliding_window",
                                                       "use_sliding_window",
                                                       "max_window_layers",
                                                       "kvlab",
                                                       "layer_types"};
// Fields that do not change what the model computes at inference.
constexpr std::array<std::string_view, 17> kInert = {"bos_token_id",
                                                     "eos_token_id",
                                                     "pad_token_id",
                                                     "torch_dtype",
                                                     "dtype",
                                                     "transformers_version",
                                                     "use_cache",
                                                     "initializer_range",
                                                     "attention_dropout",
                                                     "_name_or_path",
                                                     "tokenizer_class",
                                                     "return_dict",
                                                     "output_attentions",
                                                     "output_hidden_states",
                                                     "_attn_implementation",
                                                     "is_decoder",
                                                     "use_return_dict"};

bool listed(std::string_view key, auto const& list) {
  return std::find(list.begin(), list.end(), key) != list.end();
}

std::string supported_list() {
  std::string out;
  for (const Architecture& a : kLlamaFamily) out += std::string(a.name) + ", ";
  return out + std::string(kKvlabArchitecture);
}

bool present(const json& config, const char* key) {
  return config.contains(key) && !config.at(key).is_null();
}

std::string rope_type(const json& scaling, const std::string& field) {
  if (!scaling.is_object())
    throw SpecError(field, "expected an object, got " + json_excerpt(scaling));
  for (const char* key : {"rope_type", "type"}) {
    if (scaling.contains(key)) {
      if (!scaling.at(key).is_string()) throw SpecError(field + "." + key, "expected a string");
      return scaling.at(key).get<std::string>();
    }
  }
  throw SpecError(field, "has neither rope_type nor type");
}

void check_rope_scaling(const json& config) {
  const auto check = [](const json& scaling, const std::string& field) {
    const std::string type = rope_type(scaling, field);
    if (type == "default") return;
    if (type == "linear" || type == "llama3" || type == "yarn" || type == "dynamic") {
      throw SpecError(field, "rope type '" + type +
                                 "' is a known RoPE scaling that kvlab does not apply yet (it "
                                 "reads 'default'); loading would change the model's positions");
    }
    throw SpecError(field, "unknown rope type '" + type + "'");
  };
  if (present(config, "rope_scaling")) check(config.at("rope_scaling"), "rope_scaling");
  if (present(config, "rope_parameters")) check(config.at("rope_parameters"), "rope_parameters");
}

HfModel llama_family(const json& config, const Architecture& arch, const std::string& source) {
  for (const auto& [key, value] : config.items()) {
    if (!listed(key, kApplied) && !listed(key, kInert)) {
      throw SpecError(key, "is not a field kvlab understands for " + std::string(arch.name) +
                               " (an unknown field could change the model; remove it if it "
                               "does not)");
    }
  }
  if (!present(config, "model_type") || !config.at("model_type").is_string() ||
      config.at("model_type").get<std::string>() != arch.model_type) {
    throw SpecError("model_type", "expected \"" + std::string(arch.model_type) + "\" for " +
                                      std::string(arch.name) + ", got " +
                                      json_excerpt(config.value("model_type", json())));
  }
  if (present(config, "hidden_act") && config.at("hidden_act") != "silu") {
    throw SpecError("hidden_act", json_excerpt(config.at("hidden_act")) +
                                      " (kvlab's gated MLP is SiLU: \"silu\")");
  }
  if (present(config, "pretraining_tp") && config.at("pretraining_tp") != 1) {
    throw SpecError("pretraining_tp", "must be 1 (sliced projections are not implemented)");
  }
  if (present(config, "use_sliding_window") && config.at("use_sliding_window") != false) {
    throw SpecError("use_sliding_window", "sliding-window attention is not implemented");
  }
  const json& context_field = config.value("max_position_embeddings", json());
  const int64_t context = context_field.is_number_integer() ? context_field.get<int64_t>() : 0;
  if (present(config, "sliding_window") &&
      (!config.at("sliding_window").is_number_integer() ||
       config.at("sliding_window").get<int64_t>() < context) &&
      arch.model_type !=
          "qwen2") {  // Qwen2 keeps sliding_window but applies it only with use_sliding_window
    throw SpecError("sliding_window", json_excerpt(config.at("sliding_window")) +
                                          " is shorter than max_position_embeddings " +
                                          std::to_string(context) +
                                          ": sliding-window attention is not implemented");
  }
  if (present(config, "layer_types")) {
    if (!config.at("layer_types").is_array()) throw SpecError("layer_types", "expected an array");
    for (const json& t : config.at("layer_types")) {
      if (t != "full_attention") {
        throw SpecError("layer_types",
                        "every layer must be \"full_attention\", got " + json_excerpt(t));
      }
    }
  }
  check_rope_scaling(config);

  Preset preset = hf_preset(config, source);
  ModelShape shape = preset.shape;
  if (present(config, "rms_norm_eps")) {
    const json& eps = config.at("rms_norm_eps");
    if (!eps.is_number())
      throw SpecError("rms_norm_eps", "expected a number, got " + json_excerpt(eps));
    shape.norm_eps = eps.get<double>();
  }
  if (shape.max_context == 0) throw SpecError("max_position_embeddings", "missing (required)");
  std::string attn = preset.attn;
  DType cache_dtype = DType::kBf16;
  if (present(config, "kvlab")) {
    // kvlab's own export: the spec text is exact (it names options Llama's fields cannot).
    const json& block = config.at("kvlab");
    if (!block.is_object() || !block.contains("attn") || !block.at("attn").is_string()) {
      throw SpecError("kvlab.attn", "missing (required in a kvlab block)");
    }
    attn = block.at("attn").get<std::string>();
    if (block.contains("cache_dtype") && block.at("cache_dtype").is_string()) {
      cache_dtype = parse_dtype(block.at("cache_dtype").get<std::string>());
    }
  }
  ModelConfig model = ModelConfig::make(shape, attn, cache_dtype);
  if (present(config, "kvlab") &&
      model.attn.n_groups != ModelConfig::make(shape, preset.attn, cache_dtype).attn.n_groups) {
    throw SpecError("kvlab.attn", "'" + attn + "' disagrees with num_key_value_heads");
  }
  return {std::string(arch.name), model};
}

}  // namespace

bool is_hf_config(const json& config) {
  return config.is_object() && config.contains("architectures");
}

HfModel hf_model_from_config(const json& config, const std::string& source) {
  try {
    if (!config.is_object()) throw SpecError("hf-config", "expected a JSON object");
    const json& list = config.at("architectures");
    if (!list.is_array() || list.size() != 1 || !list[0].is_string()) {
      throw SpecError("architectures", "expected one architecture name, got " + json_excerpt(list));
    }
    const std::string name = list[0].get<std::string>();
    for (const Architecture& arch : kLlamaFamily) {
      if (arch.name == name) return llama_family(config, arch, source);
    }
    if (name == kKvlabArchitecture) {
      if (!present(config, "kvlab") || !config.at("kvlab").contains("config")) {
        throw SpecError("kvlab.config", "missing: " + name + " needs kvlab's own model config");
      }
      return {name,
              model_config_from_json(config.at("kvlab").at("config"), source + " (kvlab.config)")};
    }
    for (const auto& [other, missing] : kNotYet) {
      if (other == name) {
        throw SpecError("architectures",
                        "'" + name + "' is not loaded yet (" + std::string(missing) +
                            " are not implemented); kvlab loads " + supported_list());
      }
    }
    throw SpecError(
        "architectures",
        "'" + name + "' is not an architecture kvlab loads (it loads " + supported_list() + ")");
  } catch (const SpecError& e) {
    throw SpecError(e.field(), source + ": " + e.what());
  }
}

std::string hf_architecture_for(const ModelConfig& config) {
  const ModelShape& s = config.shape;
  const AttentionSpec& a = config.attn;
  const bool standard = a.variant == AttnVariant::kMha || a.variant == AttnVariant::kGqa ||
                        a.variant == AttnVariant::kMqa;
  const bool llama_blocks = s.kind == ModelKind::kDecoder && s.norm == NormKind::kRmsNorm &&
                            s.mlp_kind == MlpKind::kSwiglu && s.pos == PosScheme::kRope &&
                            !s.moe.enabled() && s.head_dim % 2 == 0;
  if (standard && llama_blocks && !a.k_norm && s.bias == BiasKind::kNone) return "LlamaForCausalLM";
  if (standard && llama_blocks && !a.k_norm && s.bias == BiasKind::kQkv) return "Qwen2ForCausalLM";
  return std::string(kKvlabArchitecture);
}

json hf_config_for(const ModelConfig& config) {
  const ModelShape& s = config.shape;
  const std::string arch = hf_architecture_for(config);
  const json kvlab_block = {{"attn", config.attn.to_string()},
                            {"cache_dtype", std::string(dtype_name(config.attn.cache_dtype))},
                            {"version", kVersion},
                            {"config", model_config_to_json(config)}};
  if (arch == kKvlabArchitecture) {
    return {{"architectures", {arch}},
            {"model_type", "kvlab"},
            {"kvlab", kvlab_block},
            {"vocab_size", s.vocab_size},
            {"hidden_size", s.d_model},
            {"num_hidden_layers", s.n_layers},
            {"num_attention_heads", s.n_heads},
            {"torch_dtype", "float32"}};
  }
  return {{"architectures", {arch}},
          {"model_type", arch == "Qwen2ForCausalLM" ? "qwen2" : "llama"},
          {"hidden_size", s.d_model},
          {"num_hidden_layers", s.n_layers},
          {"num_attention_heads", s.n_heads},
          {"num_key_value_heads", config.attn.n_groups},
          {"head_dim", s.head_dim},
          {"intermediate_size", s.mlp_width},
          {"vocab_size", s.vocab_size},
          {"max_position_embeddings", s.max_context},
          {"rms_norm_eps", s.norm_eps},
          {"rope_theta", s.rope_theta},
          {"rope_scaling", nullptr},
          {"tie_word_embeddings", s.tied_embeddings},
          {"attention_bias", false},
          {"mlp_bias", false},
          {"hidden_act", "silu"},
          {"torch_dtype", "float32"},
          {"kvlab", kvlab_block}};
}

}  // namespace kvlab
