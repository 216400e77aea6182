#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <string>

#include "nn/transformer.h"

namespace kvlab::nn {

// A Hugging Face model folder: config.json (io/hf_model_config.h says which architectures),
// and model.safetensors or model.safetensors.index.json with its shards. Tensors in f32, f16
// or bf16 are converted to `options`' dtype as they are copied from the mapped files (each
// byte read once). Every expected tensor must be present with its shape and nothing else may
// be: the names are listed in the error, before any weight is copied.
// Throws SpecError (config) or SafetensorsError (weights) naming the file and the tensor.
TransformerModel load_hf_model(const std::string& dir, const nlohmann::json& config,
                               const torch::TensorOptions& options = torch::kFloat32);

// Writes `model` as a Hugging Face folder: config.json (hf_config_for), model.safetensors in the
// model's dtype, generation_config.json, and for byte-level decoders (vocab 256) tokenizer.json
// + tokenizer_config.json. Each file atomically. Returns the architecture written.
std::string save_hf_model(const TransformerModelImpl& model, const std::string& dir);

}  // namespace kvlab::nn
