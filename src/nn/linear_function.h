#pragma once

#include <torch/torch.h>

#include <string>

namespace kvlab::nn {

// How a linear's products are computed: f32, or bf16 operands (x, W, and dy in the backward,
// rounded to nearest even) with f32 sums and f32 outputs — autocast-style, with the master
// weights and everything outside the products in f32. bf16 only where the CPU multiplies bf16
// in hardware.
enum class MatmulPrecision { kF32, kBf16 };

// "f32" | "bf16"; throws SpecError("matmul-precision") for another name, and for bf16 on a CPU
// without AVX-512 BF16 or AMX.
MatmulPrecision parse_matmul_precision(const std::string& text);

// y = x·Wᵀ + b over the last dimension: x [..., in], W [out, in], b [out] or undefined ->
// [..., out]. f32 CPU tensors go through an autograd function whose three products (y, dx =
// dy·W, dW = dyᵀ·x) are oneDNN's (kernels/gemm: sgemm, or gemm_bf16 at bf16 precision) and
// whose bias is the product's initial value (one pass fewer than mm then add); anything else
// is libtorch's linear, the twin the tests hold it to.
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                     MatmulPrecision precision = MatmulPrecision::kF32);

}  // namespace kvlab::nn
