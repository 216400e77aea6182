#include "nn/layers.h"

#include <cmath>
#include <vector>

#include "kernels/rope.h"
#include "nn/linear_function.h"

namespace kvlab::nn {

LinearImpl::LinearImpl(int64_t in_features, int64_t out_features, bool has_bias,
                       const torch::TensorOptions& options) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  weight = register_parameter("weight", torch::empty({out_features, in_features}, options));
  torch::NoGradGuard no_grad;
  weight.uniform_(-bound, bound);
  if (has_bias) {
    bias = register_parameter("bias", torch::empty({out_features}, options));
    bias.uniform_(-bound, bound);
  }
}

torch::Tensor LinearImpl::forward(const torch::Tensor& x) {
  return nn::linear(x, weight, bias, matmul_precision);
}

NormImpl::NormImpl(NormKind norm_kind, int64_t width, const torch::TensorOptions& options,
                   double epsilon)
    : kind(norm_kind), eps(epsilon) {
  weight = register_parameter("weight", torch::ones({width}, options));
  if (kind == NormKind::kLayerNorm)
    bias = register_parameter("bias", torch::zeros({width}, options));
}

torch::Tensor NormImpl::forward(const torch::Tensor& x) {
  if (kind == NormKind::kLayerNorm) {
    return torch::layer_norm(x, {x.size(-1)}, weight, bias, eps);
  }
  return x * torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps) * weight;
}

torch::Tensor apply_rope(const torch::Tensor& x, int64_t start_pos, double theta,
                         const RopeScaling& scaling) {
  const int64_t seq = x.size(1);
  const int64_t half = x.size(-1) / 2;
  // [half]: the frequencies of kernels/rope.h, so the cached decode turns keys the same way
  std::vector<double> frequencies(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    frequencies[static_cast<size_t>(i)] = rope_frequency(i, 2 * half, theta, scaling);
  }
  const auto f64 = x.options().dtype(torch::kFloat64);
  const torch::Tensor inv_freq = torch::tensor(frequencies, f64);
  const torch::Tensor positions = torch::arange(start_pos, start_pos + seq, f64);
  // [1, T, 1, half]: angles in double precision, as rope_row computes them
  const torch::Tensor angles = torch::outer(positions, inv_freq).view({1, seq, 1, half});
  const double a = scaling.attention_factor;
  const torch::Tensor cos = (angles.cos() * a).to(x.dtype());
  const torch::Tensor sin = (angles.sin() * a).to(x.dtype());
  const torch::Tensor x1 = x.narrow(-1, 0, half);
  const torch::Tensor x2 = x.narrow(-1, half, half);
  return torch::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, -1);
}

torch::Tensor sinusoid_positions(int64_t start_pos, int64_t n, int64_t width,
                                 const torch::TensorOptions& options) {
  const torch::Tensor c = torch::arange(0, width, options);
  const torch::Tensor freq =
      torch::pow(10000.0, -2.0 * torch::floor(c / 2) / static_cast<double>(width));
  const torch::Tensor angles =
      torch::outer(torch::arange(start_pos, start_pos + n, options), freq);  // [n, width]
  return torch::where(torch::remainder(c, 2) == 0, angles.sin(), angles.cos());
}

torch::Tensor sinusoid_2d(int64_t n, int64_t channels, const torch::TensorOptions& options) {
  const int64_t per_axis = channels / 2;  // channels per index (row or column)
  // channel c of an axis: sin (c even) or cos (c odd) of index · 10000^(-2⌊c/2⌋/per_axis)
  const torch::Tensor c = torch::arange(0, per_axis, options);
  const torch::Tensor freq =
      torch::pow(10000.0, -2.0 * torch::floor(c / 2) / static_cast<double>(per_axis));
  const torch::Tensor angles = torch::outer(torch::arange(0, n, options), freq);  // [n, per_axis]
  const torch::Tensor is_sin = (torch::remainder(c, 2) == 0);
  const torch::Tensor axis = torch::where(is_sin, angles.sin(), angles.cos());
  const torch::Tensor rows = axis.view({n, 1, per_axis}).expand({n, n, per_axis});
  const torch::Tensor cols = axis.view({1, n, per_axis}).expand({n, n, per_axis});
  return torch::cat({rows, cols}, -1);  // [n, n, m]
}

}  // namespace kvlab::nn
