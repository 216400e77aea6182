#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "spec/model_shape.h"

namespace kvlab {

// The lm suite's byte-level GPT on the King James Bible, by preset (quick, base); the convert
// suite trains its teachers with the same.
struct LmPreset {
  int64_t d_model, layers, heads, seq_len, steps, batch;
  double lr;
  int64_t eval_windows;    // held-out windows of seq_len bytes
  int64_t decode_context;  // cached tokens when decode speed is measured
  int64_t decode_tokens;   // tokens timed
};

// Throws SpecError("preset") for an unknown name.
LmPreset lm_preset(const std::string& name);
// Llama-style: RMSNorm, SwiGLU of ⌈8·d/3⌉ rounded to 8, RoPE, untied, 256 byte tokens.
ModelShape lm_shape(const LmPreset& preset);
// The model and training fields of results.json's "config" (d_model ... eval_windows).
nlohmann::json lm_config_json(const LmPreset& preset);
// The fields of each run's record that results.json's "runs" keep.
const std::vector<std::string>& lm_record_keys();

}  // namespace kvlab
