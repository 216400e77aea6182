#pragma once

#include <torch/torch.h>

#include <map>
#include <string>

#include "io/hf_model_config.h"

// How a Hugging Face architecture stores kvlab's parameters in its safetensors: the names, and
// what a tensor is in the file (a reordering, a transpose, three tensors fused into one).
namespace kvlab::nn {

// Tensors by name: kvlab's parameter names as in its checkpoints (file_tensor_name), or an
// architecture's.
using NamedTensors = std::map<std::string, torch::Tensor>;

// kvlab's parameters as the architecture stores them (contiguous; new tensors where the layout
// differs).
NamedTensors to_hf_layout(const NamedTensors& kvlab_tensors, const ModelConfig& config,
                          HfTensorLayout layout);
// The inverse, from the tensors of a folder (any dtype; views of the mapped file): kvlab's
// names, the values in the file's dtype. from_hf_layout(to_hf_layout(x)) == x bit for bit.
NamedTensors from_hf_layout(const NamedTensors& hf_tensors, const ModelConfig& config,
                            HfTensorLayout layout);
// A folder's tensor name as to_hf_layout writes it (GPT-2 files saved from GPT2Model lack the
// "transformer." prefix GPT2LMHeadModel writes).
std::string canonical_hf_name(const std::string& name, HfTensorLayout layout);
// Tensors a folder may hold that are not parameters (GPT-2's causal-mask buffers attn.bias and
// attn.masked_bias, which older transformers saved).
bool is_hf_buffer(const std::string& canonical_name, HfTensorLayout layout);

}  // namespace kvlab::nn
