#pragma once

#include "nn/attention.h"
#include "nn/layers.h"

namespace kvlab::nn {

// The Q=K=V collapse of seed 003 A.1 with feature map φ(z) = elu(z) + 1: z = W x,
// y_t = Σ_{s≤t} (φ(z_t)·φ(z_s)) z_s / Σ_{s≤t} φ(z_t)·φ(z_s). The parallel form serves
// training; the recurrent form keeps S_t = S_{t-1} + φ(z_t) z_tᵀ and n_t = n_{t-1} + φ(z_t),
// a constant-size state (d_h × d_h + d_h per head) instead of a growing cache.
class LinearAttentionImpl : public AttentionImpl {
 public:
  struct State {
    torch::Tensor kv;   // S: [B, H, d_h, d_h]
    torch::Tensor sum;  // n: [B, H, d_h]
  };

  LinearAttentionImpl(const AttentionSpec& spec, const torch::TensorOptions& options);

  torch::Tensor forward(const torch::Tensor& x, int64_t start_pos = 0) override;  // parallel
  State initial_state(int64_t batch, const torch::TensorOptions& options) const;
  // One token per sequence: x [B, 1, D] -> [B, 1, D], updating `state` in place.
  torch::Tensor step(const torch::Tensor& x, State& state);
  // The recurrence over a whole sequence, token by token (causal models only).
  torch::Tensor forward_recurrent(const torch::Tensor& x);

  Linear qkv_proj{nullptr};  // D -> H·d_h, query, key and value at once
  Linear o_proj{nullptr};    // H·d_h -> D
};

}  // namespace kvlab::nn
