#pragma once

#include <cstdint>
#include <string>

#include "experiments/bench.h"
#include "spec/model_config.h"

namespace kvlab {

// The random-weight model `bench prefill` and `bench generate` time for one --attn spec: a
// Llama-style decoder of --layers × --d-model with --heads heads, SwiGLU 4 × d_model wide, a byte
// vocabulary, tied embeddings, RoPE (none for linear attention), `context` positions. Errors name
// their flag.
ModelConfig bench_model(const BenchModelOptions& b, const std::string& attn, int64_t context);

}  // namespace kvlab
