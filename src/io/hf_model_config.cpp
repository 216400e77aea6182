#include "io/hf_model_config.h"

#include <algorithm>
#include <array>
#include <string_view>

#include "io/hf_config.h"
#include "io/hf_fields.h"
#include "io/hf_gpt2_config.h"
#include "io/hf_rope_scaling.h"
#include "io/json_document.h"
#include "io/model_config_json.h"
#include "spec/spec_error.h"
#include "spec/version.h"

namespace kvlab {
namespace {

using nlohmann::json;
using namespace hf_fields;

struct Architecture {
  std::string_view name;
  std::string_view model_type;
};

constexpr std::array<Architecture, 4> kLlamaFamily = {{
    {"LlamaForCausalLM", "llama"},
    {"MistralForCausalLM", "mistral"},
    {"Qwen2ForCausalLM", "qwen2"},
    {"Qwen3ForCausalLM", "qwen3"},  // + per-head q_norm / k_norm before RoPE
}};
constexpr std::array<Architecture, 2> kDeepseekFamily = {{
    {"DeepseekV2ForCausalLM", "deepseek_v2"},
    {"DeepseekV3ForCausalLM", "deepseek_v3"},
}};
constexpr std::string_view kKvlabArchitecture = "KvlabForCausalLM";
constexpr std::string_view kGpt2Architecture = "GPT2LMHeadModel";

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
bool listed(std::string_view key, auto const& list) {
  return std::find(list.begin(), list.end(), key) != list.end();
}

std::string supported_list() {
  std::string out;
  for (const Architecture& a : kLlamaFamily) out += std::string(a.name) + ", ";
  for (const Architecture& a : kDeepseekFamily) out += std::string(a.name) + ", ";
  return out + std::string(kGpt2Architecture) + ", " + std::string(kKvlabArchitecture);
}

// DeepSeek's fields beyond the shared ones (the MLA widths, the MoE and its router).
constexpr std::array<std::string_view, 20> kDeepseekApplied = {"kv_lora_rank",
                                                               "q_lora_rank",
                                                               "qk_rope_head_dim",
                                                               "qk_nope_head_dim",
                                                               "v_head_dim",
                                                               "n_routed_experts",
                                                               "n_shared_experts",
                                                               "num_experts_per_tok",
                                                               "moe_intermediate_size",
                                                               "first_k_dense_replace",
                                                               "moe_layer_freq",
                                                               "n_group",
                                                               "topk_group",
                                                               "topk_method",
                                                               "scoring_func",
                                                               "norm_topk_prob",
                                                               "routed_scaling_factor",
                                                               "rope_interleave",
                                                               "head_dim",
                                                               "num_key_value_heads"};
// Training-time or remote-code fields that do not change inference.
constexpr std::array<std::string_view, 5> kDeepseekInert = {"aux_loss_alpha", "seq_aux", "ep_size",
                                                            "auto_map", "num_nextn_predict_layers"};

// Checks every architecture makes alike: each field is one kvlab applies or knows to be inert
// (DeepSeek's own lists added for DeepSeek), model_type matches, SiLU, unsliced projections.
void check_common_fields(const json& config, const Architecture& arch, bool deepseek) {
  for (const auto& [key, value] : config.items()) {
    const bool known = listed(key, kApplied) || is_inert_hf_field(key) ||
                       (deepseek && (listed(key, kDeepseekApplied) || listed(key, kDeepseekInert)));
    if (!known) {
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
}

// hf_preset's shape with what only loading needs: rms_norm_eps, a required context, RoPE
// scaling (with DeepSeek's softmax factor for DeepSeek).
ModelShape loaded_shape(const json& config, const Preset& preset, bool deepseek) {
  ModelShape shape = preset.shape;
  if (present(config, "rms_norm_eps")) {
    const json& eps = config.at("rms_norm_eps");
    if (!eps.is_number())
      throw SpecError("rms_norm_eps", "expected a number, got " + json_excerpt(eps));
    shape.norm_eps = eps.get<double>();
  }
  if (shape.max_context == 0) throw SpecError("max_position_embeddings", "missing (required)");
  shape.rope_scaling = read_hf_rope_scaling(config, shape.max_context, deepseek);
  return shape;
}

// kvlab's own export records the cache dtype it was trained with; bf16 otherwise.
DType cache_dtype_of(const json& config) {
  if (present(config, "kvlab") && config.at("kvlab").is_object() &&
      config.at("kvlab").contains("cache_dtype") &&
      config.at("kvlab").at("cache_dtype").is_string()) {
    return parse_dtype(config.at("kvlab").at("cache_dtype").get<std::string>());
  }
  return DType::kBf16;
}

HfModel llama_family(const json& config, const Architecture& arch, const std::string& source) {
  check_common_fields(config, arch, /*deepseek=*/false);
  if (present(config, "use_sliding_window") && config.at("use_sliding_window") != false) {
    throw SpecError("use_sliding_window", "sliding-window attention is not implemented");
  }
  const json& context_field = config.value("max_position_embeddings", json());
  const int64_t context = context_field.is_number_integer() ? context_field.get<int64_t>() : 0;
  if (present(config, "sliding_window") &&
      (!config.at("sliding_window").is_number_integer() ||
       config.at("sliding_window").get<int64_t>() < context) &&
      // Qwen2 and Qwen3 keep sliding_window but apply it only with use_sliding_window
      arch.model_type != "qwen2" && arch.model_type != "qwen3") {
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
  const Preset preset = hf_preset(config, source);
  const ModelShape shape = loaded_shape(config, preset, /*deepseek=*/false);
  std::string attn = preset.attn;
  const DType cache_dtype = cache_dtype_of(config);
  if (present(config, "kvlab")) {
    // kvlab's own export: the spec text is exact (it names options Llama's fields cannot).
    const json& block = config.at("kvlab");
    if (!block.is_object() || !block.contains("attn") || !block.at("attn").is_string()) {
      throw SpecError("kvlab.attn", "missing (required in a kvlab block)");
    }
    attn = block.at("attn").get<std::string>();
  }
  ModelConfig model = ModelConfig::make(shape, attn, cache_dtype);
  if (present(config, "kvlab") &&
      model.attn.n_groups != ModelConfig::make(shape, preset.attn, cache_dtype).attn.n_groups) {
    throw SpecError("kvlab.attn", "'" + attn + "' disagrees with num_key_value_heads");
  }
  return {std::string(arch.name), model};
}

// The router of DeepSeek-V2 (softmax; greedy or group-limited by the best expert; renormalised
// or scaled) and V3 (sigmoid; a correction bias for the choice; groups ranked by their best two;
// renormalised, then scaled), as their reference code routes.
void read_router(const json& config, bool v3, MoeShape& moe) {
  const std::string scoring = string_or(config, "scoring_func", v3 ? "sigmoid" : "softmax");
  const std::string method = string_or(config, "topk_method", v3 ? "noaux_tc" : "greedy");
  const bool norm = bool_or(config, "norm_topk_prob", false) && moe.experts_per_token > 1;
  const double scale =
      present(config, "routed_scaling_factor")
          ? positive_number(config.at("routed_scaling_factor"), "routed_scaling_factor")
          : 1.0;
  const int64_t groups = positive_int_or(config, "n_group", 1);
  const int64_t groups_per_token = positive_int_or(config, "topk_group", 1);
  const bool grouped = v3 || method == "group_limited_greedy";
  if (grouped && moe.n_routed_experts % groups != 0) {
    throw SpecError("n_group", std::to_string(moe.n_routed_experts) +
                                   " routed experts do not split into " + std::to_string(groups) +
                                   " groups");
  }
  if (grouped && groups_per_token > groups) {
    throw SpecError("topk_group",
                    std::to_string(groups_per_token) + " of " + std::to_string(groups) + " groups");
  }
  if (v3) {
    if (scoring != "sigmoid") {
      throw SpecError("scoring_func", "DeepSeek-V3 routes by \"sigmoid\", got \"" + scoring + "\"");
    }
    if (method != "noaux_tc") {
      throw SpecError("topk_method", "DeepSeek-V3 routes by \"noaux_tc\", got \"" + method + "\"");
    }
    moe.scoring = MoeScoring::kSigmoid;  // score_correction: hf_preset sets it for V3
    moe.group_score = MoeGroupScore::kTopTwoSum;
    moe.n_expert_groups = groups;
    moe.groups_per_token = groups_per_token;
    moe.normalize_top_k = norm;
    moe.routed_scale = scale;
    return;
  }
  if (scoring != "softmax") {
    throw SpecError("scoring_func", "DeepSeek-V2 routes by \"softmax\", got \"" + scoring + "\"");
  }
  if (method == "group_limited_greedy") {
    moe.n_expert_groups = groups;
    moe.groups_per_token = groups_per_token;
  } else if (method != "greedy") {
    throw SpecError("topk_method",
                    "DeepSeek-V2 routes by \"greedy\" or "
                    "\"group_limited_greedy\", got \"" +
                        method + "\"");
  }
  // DeepSeek-V2's code renormalises the chosen weights or scales them, never both
  if (norm && scale != 1.0) {
    throw SpecError("routed_scaling_factor",
                    "with norm_topk_prob true, DeepSeek-V2's code ignores the factor and other "
                    "implementations apply it; kvlab will not guess (set it to 1.0)");
  }
  moe.normalize_top_k = norm;
  moe.routed_scale = norm ? 1.0 : scale;
}

HfModel deepseek_family(const json& config, const Architecture& arch, const std::string& source) {
  const bool v3 = arch.model_type == "deepseek_v3";
  check_common_fields(config, arch, /*deepseek=*/true);
  if (!present(config, "kv_lora_rank")) {
    throw SpecError("kv_lora_rank", "missing: " + std::string(arch.name) + " is MLA");
  }
  if (bool_or(config, "attention_bias", false) || bool_or(config, "mlp_bias", false)) {
    throw SpecError("attention_bias", "DeepSeek's projections carry no bias");
  }
  if (!bool_or(config, "rope_interleave", true)) {
    throw SpecError("rope_interleave",
                    "false (rotate-half RoPE rows) is not a layout DeepSeek publishes; kvlab reads "
                    "the interleaved one");
  }
  const Preset preset = hf_preset(config, source);
  ModelShape shape = loaded_shape(config, preset, /*deepseek=*/true);
  if (shape.moe.enabled()) read_router(config, v3, shape.moe);
  HfModel out{std::string(arch.name),
              ModelConfig::make(shape, preset.attn, cache_dtype_of(config))};
  out.layout = HfTensorLayout::kDeepseekRope;
  out.mtp_layers = non_negative_int_or(config, "num_nextn_predict_layers", 0);
  return out;
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
    for (const Architecture& arch : kDeepseekFamily) {
      if (arch.name == name) return deepseek_family(config, arch, source);
    }
    if (name == kGpt2Architecture) {
      return {name, gpt2_model_config(config, source), HfTensorLayout::kGpt2};
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
                            !s.moe.enabled() && s.head_dim % 2 == 0 &&
                            s.rope_scaling.score_mscale == 0;
  if (standard && llama_blocks && !a.qk_norm && s.bias == BiasKind::kNone)
    return "LlamaForCausalLM";
  if (standard && llama_blocks && !a.qk_norm && s.bias == BiasKind::kQkv) return "Qwen2ForCausalLM";
  if (standard && llama_blocks && a.qk_norm && s.bias == BiasKind::kNone) return "Qwen3ForCausalLM";
  if (has_gpt2_blocks(config)) return std::string(kGpt2Architecture);
  const bool deepseek_blocks = s.kind == ModelKind::kDecoder && s.norm == NormKind::kRmsNorm &&
                               s.mlp_kind == MlpKind::kSwiglu && s.pos == PosScheme::kRope &&
                               s.bias == BiasKind::kNone && a.variant == AttnVariant::kMla &&
                               !a.plain_latent;
  if (deepseek_blocks) {
    const MoeShape& m = s.moe;
    const bool v2_router =
        !m.enabled() ||
        (m.scoring == MoeScoring::kSoftmax && !m.score_correction &&
         m.group_score == MoeGroupScore::kMax && (!m.normalize_top_k || m.routed_scale == 1.0));
    const bool v3_router = m.enabled() && m.scoring == MoeScoring::kSigmoid && m.score_correction &&
                           m.group_score == MoeGroupScore::kTopTwoSum;
    if (v2_router) return "DeepseekV2ForCausalLM";
    if (v3_router) return "DeepseekV3ForCausalLM";
  }
  return std::string(kKvlabArchitecture);
}

namespace {

// The fields a Llama-family and a DeepSeek config.json write alike.
json decoder_fields(const std::string& arch, const std::string& model_type, const ModelShape& s,
                    bool deepseek) {
  return {{"architectures", {arch}},
          {"model_type", model_type},
          {"hidden_size", s.d_model},
          {"num_hidden_layers", s.n_layers},
          {"num_attention_heads", s.n_heads},
          {"intermediate_size", s.mlp_width},
          {"vocab_size", s.vocab_size},
          {"max_position_embeddings", s.max_context},
          {"rms_norm_eps", s.norm_eps},
          {"rope_theta", s.rope_theta},
          {"rope_scaling", hf_rope_scaling_json(s.rope_scaling, deepseek)},
          {"tie_word_embeddings", s.tied_embeddings},
          {"attention_bias", false},
          {"hidden_act", "silu"},
          {"torch_dtype", "float32"}};
}

}  // namespace

json hf_config_for(const ModelConfig& config) {
  const ModelShape& s = config.shape;
  const std::string arch = hf_architecture_for(config);
  const json kvlab_block = {{"attn", config.attn.to_string()},
                            {"cache_dtype", std::string(dtype_name(config.attn.cache_dtype))},
                            {"version", kVersion},
                            {"config", model_config_to_json(config)}};
  if (arch == kGpt2Architecture) return gpt2_config_for(config, kvlab_block);
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
  if (arch == "DeepseekV2ForCausalLM" || arch == "DeepseekV3ForCausalLM") {
    const AttentionSpec& a = config.attn;
    const MoeShape& m = s.moe;
    const bool v3 = arch == "DeepseekV3ForCausalLM";
    json out = decoder_fields(arch, v3 ? "deepseek_v3" : "deepseek_v2", s, /*deepseek=*/true);
    out["num_key_value_heads"] = s.n_heads;
    out["kv_lora_rank"] = a.latent_dim;
    out["q_lora_rank"] = a.q_latent_dim > 0 ? json(a.q_latent_dim) : json(nullptr);
    out["qk_rope_head_dim"] = a.rope_dim;
    out["qk_nope_head_dim"] = a.nope_dim;
    out["v_head_dim"] = a.value_dim;
    out["kvlab"] = kvlab_block;
    if (m.enabled()) {
      out["n_routed_experts"] = m.n_routed_experts;
      out["n_shared_experts"] = m.n_shared_experts;
      out["num_experts_per_tok"] = m.experts_per_token;
      out["moe_intermediate_size"] = m.expert_mlp_width;
      out["first_k_dense_replace"] = m.n_dense_layers;
      out["moe_layer_freq"] = 1;
      out["n_group"] = m.n_expert_groups;
      out["topk_group"] = m.groups_per_token;
      out["scoring_func"] = v3 ? "sigmoid" : "softmax";
      out["topk_method"] = v3                      ? "noaux_tc"
                           : m.n_expert_groups > 1 ? "group_limited_greedy"
                                                   : "greedy";
      out["norm_topk_prob"] = m.normalize_top_k;
      out["routed_scaling_factor"] = m.routed_scale;
    } else {
      out["n_routed_experts"] = nullptr;
    }
    return out;
  }
  const std::string model_type = arch == "Qwen2ForCausalLM"   ? "qwen2"
                                 : arch == "Qwen3ForCausalLM" ? "qwen3"
                                                              : "llama";
  json out = decoder_fields(arch, model_type, s, /*deepseek=*/false);
  out["num_key_value_heads"] = config.attn.n_groups;
  out["head_dim"] = s.head_dim;
  out["mlp_bias"] = false;
  out["kvlab"] = kvlab_block;
  return out;
}

}  // namespace kvlab
