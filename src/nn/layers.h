#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "nn/linear_function.h"
#include "spec/model_shape.h"

namespace kvlab::nn {

// y = x Wᵀ + b with W stored [out, in] like torch's Linear, created with explicit tensor
// options so a whole model can be built on the meta device (no memory) to count it.
// Init: torch's default, U(±1/sqrt(in)) for weight and bias.
class LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(int64_t in_features, int64_t out_features, bool has_bias,
             const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x);  // [..., in] -> [..., out]

  torch::Tensor weight;  // [out, in]
  torch::Tensor bias;    // [out], or undefined
  MatmulPrecision matmul_precision = MatmulPrecision::kF32;
};
TORCH_MODULE(Linear);

// LayerNorm (weight and bias) or RMSNorm (weight only) over the last dimension.
class NormImpl : public torch::nn::Module {
 public:
  NormImpl(NormKind kind, int64_t width, const torch::TensorOptions& options, double eps = 1e-5);
  torch::Tensor forward(const torch::Tensor& x);

  NormKind kind;
  double eps;
  torch::Tensor weight;  // [width]
  torch::Tensor bias;    // [width] (LayerNorm only)
};
TORCH_MODULE(Norm);

// RoPE in the GPT-NeoX / Hugging Face form: rotate the two halves of the last dimension.
// x: [B, T, n, d] with d even; token t sits at position start_pos + t. Frequencies and the
// cos/sin factor are kernels/rope.h's, so the cached decode turns vectors the same way.
torch::Tensor apply_rope(const torch::Tensor& x, int64_t start_pos, double theta,
                         const RopeScaling& scaling);

// Vaswani et al.'s fixed position features: [T, width], PE(t, 2i) = sin(t·10000^(-2i/width)),
// PE(t, 2i+1) = cos(same angle), for positions start_pos .. start_pos + T - 1.
torch::Tensor sinusoid_positions(int64_t start_pos, int64_t n, int64_t width,
                                 const torch::TensorOptions& options);

// The fixed 2-D sinusoidal tensor P of the "+" variants (seed 003 §3.1, A.2): [n, n, m].
// Channels [0, m/2) encode the row (query) index, [m/2, m) the column (key) index, each
// as interleaved sin/cos at frequencies 10000^(-2k/(m/2)), as in Vaswani et al.
torch::Tensor sinusoid_2d(int64_t n, int64_t channels, const torch::TensorOptions& options);

}  // namespace kvlab::nn
