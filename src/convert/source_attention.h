#pragma once

#include <torch/torch.h>

#include "spec/attention_spec.h"

namespace kvlab::nn {
class AttentionImpl;
}

namespace kvlab::convert {

// One mha/gqa/mqa layer's projections in f64, per head, each with its bias as a last input
// column ("augmented": a row applied to [x ; 1]), so that every statistic a conversion needs
// is a product with the second moment of [x ; 1] (LayerMoments).
struct SourceAttention {
  AttentionSpec spec;
  torch::Tensor q;         // [H, d, D+1]
  torch::Tensor k;         // [G, d, D+1]
  torch::Tensor v;         // [G, d, D+1]
  torch::Tensor o_weight;  // [D, H·d]
  torch::Tensor o_bias;    // [D] (undefined without output biases)

  // Throws SpecError("checkpoint") when the layer is not mha, gqa or mqa.
  static SourceAttention from(const nn::AttentionImpl& layer);
  int64_t heads_per_group() const { return spec.n_heads / spec.n_groups; }
};

// Mean second moment of [x ; 1] over the calibration tokens of one layer's attention input.
struct LayerMoments {
  torch::Tensor sum;  // [D+1, D+1] f64, Σ [x;1][x;1]ᵀ
  int64_t tokens = 0;

  void add(const torch::Tensor& x);  // x: [..., D]
  torch::Tensor mean() const { return sum / static_cast<double>(tokens); }
};

// [m, D] weights and [m] bias (or undefined) -> [m, D+1]; and back.
torch::Tensor augment(const torch::Tensor& weight, const torch::Tensor& bias);
torch::Tensor weight_of(const torch::Tensor& augmented);
torch::Tensor bias_of(const torch::Tensor& augmented);

// E[a bᵀ] for a = A [x;1], b = B [x;1]: A [.., m, D+1], B [.., n, D+1], C the mean moment ->
// [.., m, n]
torch::Tensor cross_moment(const torch::Tensor& a, const torch::Tensor& c, const torch::Tensor& b);
// Means of consecutive blocks of n_from / n_to entries along dim 0: [n_from, ...] -> [n_to, ...]
// (Ainslie et al.'s mean pooling of key/value heads into fewer groups).
torch::Tensor merge_groups(const torch::Tensor& per_group, int64_t n_to);
// Solves (A + λ I) X = B for symmetric positive semi-definite A, λ a 1e-12 fraction of A's
// mean diagonal (so that a rank-deficient A still gives the least-norm-like solution).
torch::Tensor solve_psd(const torch::Tensor& a, const torch::Tensor& b);

}  // namespace kvlab::convert
