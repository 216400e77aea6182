#pragma once

#include <cstdint>

namespace kvlab {

// GELU in the two forms models use: x·Φ(x) with the exact normal CDF (kErf), and GPT-2's
// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) (kTanh). Element-wise over n contiguous floats;
// the reference twins are libtorch's gelu and gelu_backward, and erfc / tanh in f64.
enum class GeluForm { kErf, kTanh };

// y = gelu(x)
void gelu_forward(GeluForm form, const float* x, float* y, int64_t n);

// SwiGLU's gate: up[i] *= silu(gate[i]) = gate[i] · σ(gate[i]) (the decode step's MLP); the
// reference twin is x / (1 + e^−x) in f64.
void swiglu_forward(const float* gate, float* up, int64_t n);

// dx = dy · gelu'(x)
void gelu_backward(GeluForm form, const float* x, const float* dy, float* dx, int64_t n);

}  // namespace kvlab
