#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "spec/model_config.h"

namespace kvlab {

// The model part of a checkpoint's config.json: the shape field by field, the canonical
// attention spec text and the cache dtype.
nlohmann::json model_config_to_json(const ModelConfig& config);
// Throws SpecError naming the JSON field ("model.d_model", "attn", ...) for anything missing,
// mistyped or impossible; `source` names the file in messages.
ModelConfig model_config_from_json(const nlohmann::json& doc, const std::string& source);

}  // namespace kvlab
