#include "io/hf_fields.h"

#include <algorithm>
#include <array>

#include "io/json_document.h"
#include "spec/spec_error.h"

namespace kvlab::hf_fields {

using nlohmann::json;

bool present(const json& config, const char* key) {
  return config.contains(key) && !config.at(key).is_null();
}

int64_t positive_int(const json& config, const char* key) {
  if (!present(config, key)) throw SpecError(key, "missing from the config (required)");
  const json& value = config.at(key);
  if (!value.is_number_integer() || value.get<int64_t>() <= 0) {
    throw SpecError(key, "expected a positive integer, got " + json_excerpt(value));
  }
  return value.get<int64_t>();
}

int64_t non_negative_int_or(const json& config, const char* key, int64_t fallback) {
  if (!present(config, key)) return fallback;
  const json& value = config.at(key);
  if (!value.is_number_integer() || value.get<int64_t>() < 0) {
    throw SpecError(key, "expected a non-negative integer, got " + json_excerpt(value));
  }
  return value.get<int64_t>();
}

int64_t positive_int_or(const json& config, const char* key, int64_t fallback) {
  return present(config, key) ? positive_int(config, key) : fallback;
}

bool bool_or(const json& config, const char* key, bool fallback) {
  if (!present(config, key)) return fallback;
  if (!config.at(key).is_boolean()) {
    throw SpecError(key, "expected true or false, got " + json_excerpt(config.at(key)));
  }
  return config.at(key).get<bool>();
}

double positive_number(const json& value, const std::string& key) {
  if (!value.is_number() || value.get<double>() <= 0) {
    throw SpecError(key, "expected a positive number, got " + json_excerpt(value));
  }
  return value.get<double>();
}

std::string string_or(const json& config, const char* key, const std::string& fallback) {
  if (!present(config, key)) return fallback;
  if (!config.at(key).is_string()) {
    throw SpecError(key, "expected a string, got " + json_excerpt(config.at(key)));
  }
  return config.at(key).get<std::string>();
}

bool is_inert_hf_field(std::string_view key) {
  static constexpr std::array<std::string_view, 17> kInert = {"bos_token_id",
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
  return std::find(kInert.begin(), kInert.end(), key) != kInert.end();
}

}  // namespace kvlab::hf_fields
