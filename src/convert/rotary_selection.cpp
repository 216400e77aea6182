#include "convert/rotary_selection.h"

#include <cmath>
#include <set>

#include "spec/spec_error.h"

namespace kvlab::convert {

std::vector<int64_t> RotarySelection::pairs() const {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n_pairs; ++i) out.push_back(first_pair + i * stride);
  return out;
}

std::vector<int64_t> RotarySelection::rotary_channels(int64_t head_dim) const {
  std::vector<int64_t> out = pairs();
  for (const int64_t p : pairs()) out.push_back(p + head_dim / 2);
  return out;
}

std::vector<int64_t> RotarySelection::content_channels(int64_t head_dim) const {
  const std::vector<int64_t> rotary = rotary_channels(head_dim);
  const std::set<int64_t> kept(rotary.begin(), rotary.end());
  std::vector<int64_t> out;
  for (int64_t c = 0; c < head_dim; ++c) {
    if (kept.count(c) == 0) out.push_back(c);
  }
  return out;
}

double RotarySelection::rope_theta(double source_theta, int64_t head_dim) const {
  return std::pow(source_theta,
                  static_cast<double>(stride * 2 * n_pairs) / static_cast<double>(head_dim));
}

RopeScaling RotarySelection::rope_scaling(const RopeScaling& source, double source_theta,
                                          int64_t head_dim) const {
  if (source.kind != RopeScalingKind::kNone && source.kind != RopeScalingKind::kLinear) {
    throw SpecError("checkpoint",
                    "the source's RoPE scaling is '" +
                        std::string(rope_scaling_kind_name(source.kind)) +
                        "': its frequencies are not a geometric progression, so no decoupled "
                        "RoPE key of kvlab's can keep them (none and linear convert)");
  }
  const double shift =
      std::pow(source_theta, 2.0 * static_cast<double>(first_pair) / static_cast<double>(head_dim));
  RopeScaling out;
  const double factor = source.factor * shift;
  if (factor == 1.0) return out;
  out.kind = RopeScalingKind::kLinear;
  out.factor = factor;
  return out;
}

torch::Tensor pair_contributions(const SourceAttention& source, const torch::Tensor& moment) {
  const int64_t half = source.spec.head_dim / 2;
  // E[q_c²] per head and channel: diag(Q C Qᵀ) = Σ_e (Q C)_{ce} Q_{ce}
  const auto energy = [&](const torch::Tensor& rows) {  // [n, d, D+1] -> [n, d/2]
    const torch::Tensor e = (torch::matmul(rows, moment) * rows).sum(-1);
    return (e.narrow(1, 0, half) + e.narrow(1, half, half)).clamp_min(0).sqrt();
  };
  const torch::Tensor q_norm = energy(source.q);  // [H, d/2]
  const torch::Tensor k_norm = energy(source.k).repeat_interleave(source.heads_per_group(), 0);
  return (q_norm * k_norm).sum(0);
}

RotarySelection choose_rotary_pairs(const torch::Tensor& contributions, int64_t rope_dim) {
  const int64_t half = contributions.size(0), n = rope_dim / 2;
  const torch::Tensor c = contributions.to(torch::kFloat64).contiguous();
  const double* values = c.data_ptr<double>();
  RotarySelection best;
  best.n_pairs = n;
  best.contribution = -1;
  for (int64_t i = 0; i < half; ++i) best.total_contribution += values[i];
  const int64_t max_stride = n > 1 ? (half - 1) / (n - 1) : 1;
  for (int64_t stride = 1; stride <= max_stride; ++stride) {
    for (int64_t first = 0; first + (n - 1) * stride < half; ++first) {
      double sum = 0;
      for (int64_t i = 0; i < n; ++i) sum += values[first + i * stride];
      if (sum > best.contribution) {
        best.first_pair = first;
        best.stride = stride;
        best.contribution = sum;
      }
    }
  }
  return best;
}

}  // namespace kvlab::convert
