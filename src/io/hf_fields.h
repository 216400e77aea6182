#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

// Typed reads of a Hugging Face config.json's top-level fields. A field set to null counts as
// absent (transformers writes null for "not used"); a wrong type or range throws
// SpecError(key) with the value in the message.
namespace kvlab::hf_fields {

bool present(const nlohmann::json& config, const char* key);
int64_t positive_int(const nlohmann::json& config, const char* key);  // required
int64_t positive_int_or(const nlohmann::json& config, const char* key, int64_t fallback);
int64_t non_negative_int_or(const nlohmann::json& config, const char* key, int64_t fallback);
bool bool_or(const nlohmann::json& config, const char* key, bool fallback);
std::string string_or(const nlohmann::json& config, const char* key, const std::string& fallback);
double positive_number(const nlohmann::json& value, const std::string& key);

// The fields every transformers config.json may carry that do not change what the model
// computes at inference: token ids, dtypes, versions, output switches, initialisation.
bool is_inert_hf_field(std::string_view key);

}  // namespace kvlab::hf_fields
