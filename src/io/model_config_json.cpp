#include "io/model_config_json.h"

#include "io/hf_rope_scaling.h"
#include "io/json_document.h"
#include "spec/spec_error.h"

namespace kvlab {
namespace {

using nlohmann::json;

const json& field(const json& obj, const char* key, const std::string& path) {
  if (!obj.is_object() || !obj.contains(key)) throw SpecError(path + key, "missing");
  return obj.at(key);
}

int64_t int_field(const json& obj, const char* key, const std::string& path) {
  const json& v = field(obj, key, path);
  if (!v.is_number_integer())
    throw SpecError(path + key, "expected an integer, got " + json_excerpt(v));
  return v.get<int64_t>();
}

std::string string_field(const json& obj, const char* key, const std::string& path) {
  const json& v = field(obj, key, path);
  if (!v.is_string()) throw SpecError(path + key, "expected a string, got " + json_excerpt(v));
  return v.get<std::string>();
}

bool bool_field(const json& obj, const char* key, const std::string& path) {
  const json& v = field(obj, key, path);
  if (!v.is_boolean())
    throw SpecError(path + key, "expected true or false, got " + json_excerpt(v));
  return v.get<bool>();
}

}  // namespace

json model_config_to_json(const ModelConfig& config) {
  const ModelShape& s = config.shape;
  json model = {{"kind", std::string(model_kind_name(s.kind))},
                {"layers", s.n_layers},
                {"d_model", s.d_model},
                {"heads", s.n_heads},
                {"head_dim", s.head_dim},
                {"mlp", s.mlp_width},
                {"mlp_kind", std::string(mlp_kind_name(s.mlp_kind))},
                {"vocab", s.vocab_size},
                {"classes", s.n_classes},
                {"max_context", s.max_context},
                {"norm", std::string(norm_kind_name(s.norm))},
                {"norm_eps", s.norm_eps},
                {"bias", std::string(bias_kind_name(s.bias))},
                {"tied_embeddings", s.tied_embeddings},
                {"pos", std::string(pos_scheme_name(s.pos))},
                {"rope_theta", s.rope_theta},
                {"image_size", s.image_size},
                {"patch_size", s.patch_size},
                {"channels", s.image_channels},
                {"class_token", s.class_token},
                {"set_input_dim", s.set_input_dim},
                {"moe",
                 {{"routed_experts", s.moe.n_routed_experts},
                  {"shared_experts", s.moe.n_shared_experts},
                  {"experts_per_token", s.moe.experts_per_token},
                  {"expert_mlp", s.moe.expert_mlp_width},
                  {"dense_layers", s.moe.n_dense_layers},
                  {"scoring", std::string(moe_scoring_name(s.moe.scoring))},
                  {"normalize_top_k", s.moe.normalize_top_k},
                  {"routed_scale", s.moe.routed_scale},
                  {"expert_groups", s.moe.n_expert_groups},
                  {"groups_per_token", s.moe.groups_per_token},
                  {"group_score", std::string(moe_group_score_name(s.moe.group_score))},
                  {"score_correction", s.moe.score_correction}}}};
  if (s.rope_scaling.kind != RopeScalingKind::kNone) {
    model["rope_scaling"] = rope_scaling_to_json(s.rope_scaling);
  }
  return {{"model", model},
          {"attn", config.attn.to_string()},
          {"cache_dtype", std::string(dtype_name(config.attn.cache_dtype))}};
}

ModelConfig model_config_from_json(const json& doc, const std::string& source) {
  try {
    const json& m = field(doc, "model", "");
    const std::string p = "model.";
    ModelShape s;
    s.kind = parse_model_kind(string_field(m, "kind", p));
    s.n_layers = int_field(m, "layers", p);
    s.d_model = int_field(m, "d_model", p);
    s.n_heads = int_field(m, "heads", p);
    s.head_dim = int_field(m, "head_dim", p);
    s.mlp_width = int_field(m, "mlp", p);
    s.mlp_kind = parse_mlp_kind(string_field(m, "mlp_kind", p));
    s.vocab_size = int_field(m, "vocab", p);
    s.n_classes = int_field(m, "classes", p);
    s.max_context = int_field(m, "max_context", p);
    s.norm = parse_norm_kind(string_field(m, "norm", p));
    // Runs written before norm_eps was recorded used 1e-5.
    if (m.contains("norm_eps")) {
      if (!m.at("norm_eps").is_number()) throw SpecError("model.norm_eps", "expected a number");
      s.norm_eps = m.at("norm_eps").get<double>();
    }
    s.bias = parse_bias_kind(string_field(m, "bias", p));
    s.tied_embeddings = bool_field(m, "tied_embeddings", p);
    s.pos = parse_model_pos(string_field(m, "pos", p));
    const json& theta = field(m, "rope_theta", p);
    if (!theta.is_number()) throw SpecError("model.rope_theta", "expected a number");
    s.rope_theta = theta.get<double>();
    if (m.contains("rope_scaling")) {  // absent in runs without scaling (and older ones)
      s.rope_scaling = rope_scaling_from_json(m.at("rope_scaling"), "model.rope_scaling");
    }
    s.image_size = int_field(m, "image_size", p);
    s.patch_size = int_field(m, "patch_size", p);
    s.image_channels = int_field(m, "channels", p);
    s.class_token = bool_field(m, "class_token", p);
    s.set_input_dim = int_field(m, "set_input_dim", p);
    const json& moe = field(m, "moe", p);
    s.moe.n_routed_experts = int_field(moe, "routed_experts", "model.moe.");
    s.moe.n_shared_experts = int_field(moe, "shared_experts", "model.moe.");
    s.moe.experts_per_token = int_field(moe, "experts_per_token", "model.moe.");
    s.moe.expert_mlp_width = int_field(moe, "expert_mlp", "model.moe.");
    s.moe.n_dense_layers = int_field(moe, "dense_layers", "model.moe.");
    // Routing beyond softmax top-k (runs written before it was recorded used that).
    const std::string q = "model.moe.";
    if (moe.contains("scoring")) s.moe.scoring = parse_moe_scoring(string_field(moe, "scoring", q));
    if (moe.contains("normalize_top_k"))
      s.moe.normalize_top_k = bool_field(moe, "normalize_top_k", q);
    if (moe.contains("routed_scale")) {
      if (!moe.at("routed_scale").is_number()) {
        throw SpecError(q + "routed_scale", "expected a number");
      }
      s.moe.routed_scale = moe.at("routed_scale").get<double>();
    }
    if (moe.contains("expert_groups")) s.moe.n_expert_groups = int_field(moe, "expert_groups", q);
    if (moe.contains("groups_per_token"))
      s.moe.groups_per_token = int_field(moe, "groups_per_token", q);
    if (moe.contains("group_score"))
      s.moe.group_score = parse_moe_group_score(string_field(moe, "group_score", q));
    if (moe.contains("score_correction"))
      s.moe.score_correction = bool_field(moe, "score_correction", q);
    return ModelConfig::make(s, string_field(doc, "attn", ""),
                             parse_dtype(string_field(doc, "cache_dtype", "")));
  } catch (const SpecError& e) {
    throw SpecError(e.field(), source + ": " + e.what());
  }
}

}  // namespace kvlab
