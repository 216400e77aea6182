#pragma once

#include <nlohmann/json.hpp>

#include "spec/rope_scaling.h"

namespace kvlab {

// A Hugging Face config.json's RoPE scaling: `rope_scaling` (type under "rope_type" or the
// older "type") or transformers 5's `rope_parameters`; null, absent or "default" is none.
// Every key is checked: one kvlab does not apply is a SpecError naming it, as is "dynamic"
// or "longrope" (their frequencies depend on the sequence being run). yarn follows
// transformers: original_max_position_embeddings defaults to max_position_embeddings (passed
// in), the attention factor is attention_factor if given, else mscale(factor, mscale) /
// mscale(factor, mscale_all_dim) when both are set, else mscale(factor, 1). `deepseek`: the
// architecture also multiplies its softmax scale by mscale(factor, mscale_all_dim)²
// (DeepseekV2/V3 attention does; Llama's does not).
RopeScaling read_hf_rope_scaling(const nlohmann::json& config, int64_t max_position_embeddings,
                                 bool deepseek);

// The `rope_scaling` value that read_hf_rope_scaling reads back to `scaling` (null for none).
nlohmann::json hf_rope_scaling_json(const RopeScaling& scaling, bool deepseek);

// kvlab's own config.json form: every field by name; absent means none.
nlohmann::json rope_scaling_to_json(const RopeScaling& scaling);
RopeScaling rope_scaling_from_json(const nlohmann::json& value, const std::string& field);

}  // namespace kvlab
