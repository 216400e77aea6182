#include "io/hf_rope_scaling.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <string_view>

#include "io/json_document.h"
#include "spec/spec_error.h"

namespace kvlab {
namespace {

using nlohmann::json;

double number(const json& block, const std::string& path, const char* key, double fallback) {
  if (!block.contains(key) || block.at(key).is_null()) return fallback;
  const json& v = block.at(key);
  if (!v.is_number()) {
    throw SpecError(path + "." + key, "expected a number, got " + json_excerpt(v));
  }
  return v.get<double>();
}

bool has(const json& block, const char* key) {
  return block.contains(key) && !block.at(key).is_null();
}

std::string type_of(const json& block, const std::string& path) {
  for (const char* key : {"rope_type", "type"}) {
    if (has(block, key)) {
      if (!block.at(key).is_string()) throw SpecError(path + "." + key, "expected a string");
      return block.at(key).get<std::string>();
    }
  }
  throw SpecError(path, "has neither rope_type nor type");
}

// Keys each type may carry (besides rope_type / type and, in rope_parameters, rope_theta).
bool allowed(RopeScalingKind kind, std::string_view key) {
  static constexpr std::array<std::string_view, 2> kCommon = {"factor", "partial_rotary_factor"};
  static constexpr std::array<std::string_view, 3> kLlama3 = {"low_freq_factor", "high_freq_factor",
                                                              "original_max_position_embeddings"};
  static constexpr std::array<std::string_view, 7> kYarn = {"original_max_position_embeddings",
                                                            "beta_fast",
                                                            "beta_slow",
                                                            "mscale",
                                                            "mscale_all_dim",
                                                            "attention_factor",
                                                            "truncate"};
  const auto in = [&](const auto& list) {
    return std::find(list.begin(), list.end(), key) != list.end();
  };
  if (key == "rope_type" || key == "type" || key == "rope_theta") return true;
  if (in(kCommon)) return true;
  if (kind == RopeScalingKind::kLlama3) return in(kLlama3);
  if (kind == RopeScalingKind::kYarn) return in(kYarn);
  return false;
}

RopeScaling read_block(const json& block, const std::string& path, int64_t max_context,
                       bool deepseek) {
  if (!block.is_object()) throw SpecError(path, "expected an object, got " + json_excerpt(block));
  const std::string type = type_of(block, path);
  RopeScaling s;
  if (type == "default") {
    s.kind = RopeScalingKind::kNone;
  } else if (type == "linear" || type == "llama3" || type == "yarn") {
    s.kind = parse_rope_scaling_kind(type);
  } else if (type == "dynamic" || type == "longrope") {
    throw SpecError(path, "rope type '" + type +
                              "' changes its frequencies with the length of the sequence run; "
                              "kvlab applies default, linear, llama3 and yarn");
  } else {
    throw SpecError(
        path, "unknown rope type '" + type + "' (kvlab applies default, linear, llama3 and yarn)");
  }
  for (const auto& [key, value] : block.items()) {
    if (!allowed(s.kind, key) && !value.is_null()) {
      throw SpecError(path + "." + key, "is not a key kvlab applies for rope type '" + type + "'");
    }
  }
  if (number(block, path, "partial_rotary_factor", 1.0) != 1.0) {
    throw SpecError(path + ".partial_rotary_factor", "RoPE over part of the head is not applied");
  }
  if (s.kind == RopeScalingKind::kNone) return s;
  if (!has(block, "factor"))
    throw SpecError(path + ".factor", "missing (required for " + type + ")");
  s.factor = number(block, path, "factor", 1.0);
  const double original =
      number(block, path, "original_max_position_embeddings",
             s.kind == RopeScalingKind::kYarn ? static_cast<double>(max_context) : 0.0);
  if (original != std::floor(original) || original < 0 || original > 1e12) {
    throw SpecError(path + ".original_max_position_embeddings", "expected a positive integer");
  }
  s.original_context = static_cast<int64_t>(original);
  if (s.kind == RopeScalingKind::kLlama3) {
    for (const char* key :
         {"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
      if (!has(block, key)) throw SpecError(path + "." + key, "missing (required for llama3)");
    }
    s.low_freq_factor = number(block, path, "low_freq_factor", 1.0);
    s.high_freq_factor = number(block, path, "high_freq_factor", 4.0);
  }
  if (s.kind == RopeScalingKind::kYarn) {
    if (has(block, "truncate") && block.at("truncate") != true) {
      throw SpecError(path + ".truncate", "only true (a floored and ceiled ramp) is applied");
    }
    s.beta_fast = number(block, path, "beta_fast", 32.0);
    s.beta_slow = number(block, path, "beta_slow", 1.0);
    const double mscale = number(block, path, "mscale", 0.0);
    const double mscale_all_dim = number(block, path, "mscale_all_dim", 0.0);
    if (has(block, "attention_factor")) {
      s.attention_factor = number(block, path, "attention_factor", 1.0);
    } else if (mscale != 0 && mscale_all_dim != 0) {
      s.attention_factor = yarn_mscale(s.factor, mscale) / yarn_mscale(s.factor, mscale_all_dim);
    } else {
      s.attention_factor = yarn_mscale(s.factor, 1.0);
    }
    if (deepseek) s.score_mscale = mscale_all_dim;
  }
  try {
    s.validate();
  } catch (const SpecError& e) {
    throw SpecError(path, e.what());
  }
  return s;
}

}  // namespace

RopeScaling read_hf_rope_scaling(const json& config, int64_t max_position_embeddings,
                                 bool deepseek) {
  const bool scaling = has(config, "rope_scaling");
  const bool parameters = has(config, "rope_parameters");
  if (scaling && parameters) {
    const RopeScaling a =
        read_block(config.at("rope_scaling"), "rope_scaling", max_position_embeddings, deepseek);
    const RopeScaling b = read_block(config.at("rope_parameters"), "rope_parameters",
                                     max_position_embeddings, deepseek);
    if (!(a == b)) throw SpecError("rope_parameters", "disagrees with rope_scaling");
    return a;
  }
  if (scaling) {
    return read_block(config.at("rope_scaling"), "rope_scaling", max_position_embeddings, deepseek);
  }
  if (parameters) {
    return read_block(config.at("rope_parameters"), "rope_parameters", max_position_embeddings,
                      deepseek);
  }
  return {};
}

json hf_rope_scaling_json(const RopeScaling& s, bool deepseek) {
  switch (s.kind) {
    case RopeScalingKind::kNone:
      return nullptr;
    case RopeScalingKind::kLinear:
      return {{"rope_type", "linear"}, {"factor", s.factor}};
    case RopeScalingKind::kLlama3:
      return {{"rope_type", "llama3"},
              {"factor", s.factor},
              {"low_freq_factor", s.low_freq_factor},
              {"high_freq_factor", s.high_freq_factor},
              {"original_max_position_embeddings", s.original_context}};
    case RopeScalingKind::kYarn: {
      json out = {{"rope_type", "yarn"},
                  {"factor", s.factor},
                  {"original_max_position_embeddings", s.original_context},
                  {"beta_fast", s.beta_fast},
                  {"beta_slow", s.beta_slow},
                  {"attention_factor", s.attention_factor}};
      if (deepseek && s.score_mscale != 0) {
        // attention_factor, written beside them, is what multiplies cos and sin
        out["mscale_all_dim"] = s.score_mscale;
        out["mscale"] = s.score_mscale;
      }
      return out;
    }
  }
  return nullptr;
}

json rope_scaling_to_json(const RopeScaling& s) {
  return {{"type", std::string(rope_scaling_kind_name(s.kind))},
          {"factor", s.factor},
          {"original_context", s.original_context},
          {"low_freq_factor", s.low_freq_factor},
          {"high_freq_factor", s.high_freq_factor},
          {"beta_fast", s.beta_fast},
          {"beta_slow", s.beta_slow},
          {"attention_factor", s.attention_factor},
          {"score_mscale", s.score_mscale}};
}

RopeScaling rope_scaling_from_json(const json& value, const std::string& field) {
  if (!value.is_object()) throw SpecError(field, "expected an object, got " + json_excerpt(value));
  for (const auto& [key, v] : value.items()) {
    static constexpr std::array<std::string_view, 9> kKeys = {
        "type",      "factor",    "original_context", "low_freq_factor", "high_freq_factor",
        "beta_fast", "beta_slow", "attention_factor", "score_mscale"};
    if (std::find(kKeys.begin(), kKeys.end(), key) == kKeys.end()) {
      throw SpecError(field + "." + key, "unknown key");
    }
  }
  if (!value.contains("type") || !value.at("type").is_string()) {
    throw SpecError(field + ".type", "missing (a string)");
  }
  RopeScaling s;
  try {
    s.kind = parse_rope_scaling_kind(value.at("type").get<std::string>());
  } catch (const SpecError& e) {
    throw SpecError(field + ".type", e.what());
  }
  s.factor = number(value, field, "factor", 1.0);
  const double context = number(value, field, "original_context", 0.0);
  if (context != std::floor(context) || context < 0 || context > 1e12) {
    throw SpecError(field + ".original_context", "expected a non-negative integer");
  }
  s.original_context = static_cast<int64_t>(context);
  s.low_freq_factor = number(value, field, "low_freq_factor", 1.0);
  s.high_freq_factor = number(value, field, "high_freq_factor", 4.0);
  s.beta_fast = number(value, field, "beta_fast", 32.0);
  s.beta_slow = number(value, field, "beta_slow", 1.0);
  s.attention_factor = number(value, field, "attention_factor", 1.0);
  s.score_mscale = number(value, field, "score_mscale", 0.0);
  try {
    s.validate();
  } catch (const SpecError& e) {  // "rope_scaling.factor" → "<field>.factor"
    throw SpecError(field + e.field().substr(std::string_view("rope_scaling").size()), e.what());
  }
  return s;
}

}  // namespace kvlab
