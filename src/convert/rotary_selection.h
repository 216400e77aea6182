#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "convert/source_attention.h"
#include "spec/rope_scaling.h"

namespace kvlab::convert {

// The RoPE pairs a conversion keeps rotated (the rest become the unrotated content channels).
// Pair p of a head of width d rotates channels p and p + d/2 at frequency θ^(−2p/d). kvlab's
// decoupled RoPE key of width d_r rotates pair i at θ'^(−2i/d_r) / factor, so the kept pairs
// form an arithmetic progression p_i = first + i·stride: then θ' = θ^(stride·d_r/d) and a linear
// scaling factor θ^(2·first/d) give every kept pair exactly its source frequency.
struct RotarySelection {
  int64_t first_pair = 0;
  int64_t stride = 1;
  int64_t n_pairs = 0;            // d_r / 2
  double contribution = 0;        // Σ of the kept pairs' contributions
  double total_contribution = 0;  // Σ over every pair

  std::vector<int64_t> pairs() const;
  // A head's channels in the order of a d_r-wide RoPE slice: the kept pairs' first channels,
  // then their partners.
  std::vector<int64_t> rotary_channels(int64_t head_dim) const;
  // Every other channel, ascending.
  std::vector<int64_t> content_channels(int64_t head_dim) const;
  double rope_theta(double source_theta, int64_t head_dim) const;
  // Throws SpecError("checkpoint") for source scalings other than none and linear (their
  // frequencies are not a geometric progression).
  RopeScaling rope_scaling(const RopeScaling& source, double source_theta, int64_t head_dim) const;
};

// Each pair's contribution to q·k (MHA2MLA's 2-norm criterion with RMS norms): Σ over heads of
// ‖q_h,p‖·‖k_g(h),p‖, the norms over the calibration tokens. [d/2]
torch::Tensor pair_contributions(const SourceAttention& source, const torch::Tensor& moment);

// The progression of rope_dim/2 pairs with the largest summed contribution (ties: the
// smaller stride, then the earlier first pair).
RotarySelection choose_rotary_pairs(const torch::Tensor& contributions, int64_t rope_dim);

}  // namespace kvlab::convert
