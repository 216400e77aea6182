#pragma once

#include <torch/torch.h>

namespace kvlab::nn {

// GELU, exact (x·Φ(x)) or GPT-2's tanh form. f32 CPU tensors go through kvlab's kernel
// (kernels/gelu) as an autograd function: one vectorised pass forward and one backward, where
// libtorch 1.13's own gelu_backward spent 10–15 ns an element. Any other tensor (f64, bf16,
// another device) takes libtorch's gelu, which is also the twin the tests hold the kernel to.
torch::Tensor gelu(const torch::Tensor& x, bool tanh_form);

}  // namespace kvlab::nn
