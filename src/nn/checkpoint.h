#pragma once

#include <torch/torch.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "io/safetensors.h"
#include "nn/transformer.h"

namespace kvlab::nn {

// A checkpoint is a folder: model.safetensors (Hugging Face style names) and config.json
// (model shape, canonical spec text, kvlab version, and whatever `extra` the caller adds,
// e.g. the task). Every file is written to a temporary name and renamed.
void save_model(const TransformerModelImpl& model, const std::string& dir,
                const nlohmann::json& extra = nlohmann::json::object());

// Reads config.json, builds the model and loads every weight, checking that each tensor
// exists with the right shape and that nothing unexpected is in the file.
// Throws SpecError (config) or SafetensorsError (weights) naming the file and the tensor.
TransformerModel load_model(const std::string& dir,
                            const torch::TensorOptions& options = torch::kFloat32);
// Where a checkpoint folder is: DIR itself if it holds config.json, else DIR/checkpoint (a
// training run's folder). Throws SpecError("checkpoint") when neither holds one.
std::string checkpoint_dir(const std::string& dir);
// config.json of a checkpoint folder, parsed (throws when unreadable or not JSON).
nlohmann::json read_checkpoint_config(const std::string& dir);

// The name a parameter has in model.safetensors: Hugging Face's ("model.embed_tokens.weight"
// for the parameter "model.embed_tokens"; every other name is the parameter's own).
std::string file_tensor_name(const std::string& parameter);

// The torch dtype of a safetensors dtype.
torch::ScalarType torch_dtype(StDtype dtype);

// Named tensors <-> safetensors, for model and optimizer state alike.
void save_tensors(const std::string& path, const std::map<std::string, torch::Tensor>& tensors);
std::map<std::string, torch::Tensor> load_tensors(const std::string& path);
// Copies `source` into `targets` by name: every target must be present with its shape, and
// no source tensor may be left over. Throws SafetensorsError naming `what` and the tensor.
void copy_by_name(const std::map<std::string, torch::Tensor>& source,
                  const std::map<std::string, torch::Tensor>& targets, const std::string& what);

}  // namespace kvlab::nn
