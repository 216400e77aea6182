#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "spec/model_config.h"
#include "spec/presets.h"

// GPT-2's config.json (GPT2LMHeadModel: transformers' class, the layout of every GPT-2
// checkpoint on the Hub) read into kvlab's shape, and written for a kvlab model with GPT-2
// blocks: LayerNorm, GELU MLP, biases everywhere, learned positions, multi-head attention.
namespace kvlab {

// The shape and attention a GPT-2 config.json describes (for counting: every field checked for
// type and range, unknown fields allowed).
Preset gpt2_preset(const nlohmann::json& config, const std::string& source);
// The same for loading weights: every field must be one kvlab applies or knows to be inert, and
// each value one kvlab implements. Throws SpecError naming the field.
ModelConfig gpt2_model_config(const nlohmann::json& config, const std::string& source);
// Whether transformers' GPT-2 computes what this kvlab model computes.
bool has_gpt2_blocks(const ModelConfig& config);
// GPT-2's config.json for a model with GPT-2 blocks, with kvlab's block (its whole config).
nlohmann::json gpt2_config_for(const ModelConfig& config, const nlohmann::json& kvlab_block);

}  // namespace kvlab
