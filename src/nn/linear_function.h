#pragma once

#include <torch/torch.h>

namespace kvlab::nn {

// y = x·Wᵀ + b over the last dimension: x [..., in], W [out, in], b [out] or undefined ->
// [..., out]. f32 CPU tensors go through an autograd function whose three products (y, dx =
// dy·W, dW = dyᵀ·x) are oneDNN's sgemm (kernels/gemm) and whose bias is the product's initial
// value (one pass fewer than mm then add); anything else is libtorch's linear, the twin the
// tests hold it to.
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight,
                     const torch::Tensor& bias);

}  // namespace kvlab::nn
