#pragma once

#include <cstdint>

#include "kernels/thread_pool.h"

namespace kvlab {

// One decode step of causal linear attention (the Q=K=V collapse, feature map
// φ(x) = elu(x) + 1) for a batch of sequences, each head carrying a constant-size f32 state:
//   S += φ(z) zᵀ,  s += φ(z),  out = φ(z)ᵀ S / (φ(z) · s)   (state updated first).
// The state is what the cache holds: d·d + d scalars per head, whatever the context length.
struct LinearStepParams {
  const float* z = nullptr;  // [n_seqs, n_heads, head_dim]: the token's shared projection
  float* state = nullptr;  // [n_seqs, n_heads, head_dim·head_dim + head_dim]: S row-major, then s
  float* out = nullptr;    // [n_seqs, n_heads, head_dim]
  int64_t n_seqs = 0;
  int64_t n_heads = 0;
  int64_t head_dim = 0;
};

// The plain reference (readout accumulated in double). Throws std::invalid_argument naming the
// field for inconsistent parameters.
void linear_step_reference(const LinearStepParams& params);
void validate_linear_step(const LinearStepParams& params);
// AVX2 + FMA (linear_attention_step_avx2.cpp): one pass over each head's state, the update and
// the readout fused; heads spread over the pool.
void linear_step_avx2(const LinearStepParams& params, ThreadPool& pool);

}  // namespace kvlab
