#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "spec/presets.h"

namespace kvlab {

// Reads a Hugging Face config.json (Llama, Mistral, Qwen2, DeepSeek-V2/V3 and configs that
// use the same fields; GPT-2) into a Preset: the model shape and the attention it ships with.
// Throws SpecError naming the JSON field for a missing, mistyped or contradictory value.
Preset read_hf_config(const std::string& path);
Preset parse_hf_config(std::string_view json_text, const std::string& source);
// The same from a parsed config.json.
Preset hf_preset(const nlohmann::json& config, const std::string& source);

}  // namespace kvlab
