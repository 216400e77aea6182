#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "spec/model_config.h"

namespace kvlab {

// A Hugging Face model folder's config.json read for loading its weights (stricter than
// read_hf_config, which only counts): `architectures` must name a model kvlab runs, every field
// must be one kvlab applies or one known not to change the model's function, and each value
// must be one kvlab implements. Throws SpecError naming the field.
//
// Loaded: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM,
// DeepseekV2ForCausalLM, DeepseekV3ForCausalLM, GPT2LMHeadModel, and KvlabForCausalLM (what
// `kvlab export` writes for variants transformers has no class for: its "kvlab" block holds the
// whole kvlab config).

// How an architecture's safetensors hold kvlab's parameters.
enum class HfTensorLayout {
  kKvlabNames,  // the names kvlab writes (Llama's), as they are
  // DeepSeek: the RoPE rows of the query and of kv_a_proj_with_mqa pair adjacent channels
  // (2i, 2i+1); kvlab pairs i with i + d_r/2, so the loader reorders them.
  kDeepseekRope,
  // GPT-2: transformer.h.{i}.*, q/k/v fused into attn.c_attn, and every linear layer a Conv1D
  // whose weight is stored [in, out] (kvlab's transposed).
  kGpt2,
};

struct HfModel {
  std::string architecture;
  ModelConfig config;
  HfTensorLayout layout = HfTensorLayout::kKvlabNames;
  // DeepSeek-V3's multi-token-prediction layers (num_nextn_predict_layers), stored after the
  // last layer as model.layers.{num_hidden_layers + i}; next-token inference does not use
  // them, so the loader skips their tensors (as transformers does).
  int64_t mtp_layers = 0;
};

bool is_hf_config(const nlohmann::json& config);  // a config.json with "architectures"
HfModel hf_model_from_config(const nlohmann::json& config, const std::string& source);

// The Hugging Face config.json of a kvlab model: Llama's fields (Qwen2's when q/k/v carry
// biases, Qwen3's with qknorm) for a Llama-style decoder with mha/gqa/mqa, DeepSeek's for mla,
// GPT-2's for GPT-2 blocks with mha, else KvlabForCausalLM. Both carry a
// "kvlab" block (spec text, cache dtype, the full kvlab config) so that the import is exact.
nlohmann::json hf_config_for(const ModelConfig& config);
// "LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "DeepseekV2ForCausalLM",
// "DeepseekV3ForCausalLM", "GPT2LMHeadModel" (GPT-2 blocks with mha) or "KvlabForCausalLM".
std::string hf_architecture_for(const ModelConfig& config);

}  // namespace kvlab
