#include "nn/linear_function.h"

#include <ATen/record_function.h>

#include <vector>

#include "kernels/gemm.h"

namespace kvlab::nn {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

std::vector<int64_t> with_last(const torch::Tensor& x, int64_t last) {
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = last;
  return sizes;
}

struct GemmLinear : public torch::autograd::Function<GemmLinear> {
  // (the bias is an optional: an undefined tensor cannot be an autograd function's input)
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_in,
                               const torch::Tensor& weight_in,
                               const c10::optional<torch::Tensor>& bias_in) {
    const torch::Tensor bias = bias_in.value_or(torch::Tensor());
    RECORD_FUNCTION("kvlab::linear", std::vector<c10::IValue>());
    const int64_t in = weight_in.size(1), out = weight_in.size(0);
    const torch::Tensor x = x_in.reshape({-1, in}).contiguous();  // [M, in]
    const torch::Tensor weight = weight_in.contiguous();          // [out, in]
    const int64_t m = x.size(0);
    // [M, out]; clone, not contiguous(): for M = 1 the expanded bias already counts as
    // contiguous, and the product would be written into the bias itself
    torch::Tensor y =
        bias.defined() ? bias.expand({m, out}).clone() : torch::empty({m, out}, x.options());
    sgemm(false, true, m, out, in, 1.0f, x.data_ptr<float>(), in, weight.data_ptr<float>(), in,
          bias.defined() ? 1.0f : 0.0f, y.data_ptr<float>(), out);
    ctx->save_for_backward({x, weight});
    ctx->saved_data["x_sizes"] = x_in.sizes().vec();
    ctx->saved_data["has_bias"] = bias.defined();
    return y.view(with_last(x_in, out));
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    RECORD_FUNCTION("kvlab::linear_backward", std::vector<c10::IValue>());
    const tensor_list saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &weight = saved[1];  // [M, in], [out, in]
    const int64_t m = x.size(0), in = x.size(1), out = weight.size(0);
    const torch::Tensor dy = grads[0].reshape({m, out}).contiguous();  // [M, out]
    torch::Tensor dx, dweight, dbias;
    if (ctx->needs_input_grad(0)) {
      dx = torch::empty({m, in}, x.options());  // dy·W
      sgemm(false, false, m, in, out, 1.0f, dy.data_ptr<float>(), out, weight.data_ptr<float>(), in,
            0.0f, dx.data_ptr<float>(), in);
      dx = dx.view(ctx->saved_data["x_sizes"].toIntVector());
    }
    if (ctx->needs_input_grad(1)) {
      dweight = torch::empty({out, in}, x.options());  // dyᵀ·x
      sgemm(true, false, out, in, m, 1.0f, dy.data_ptr<float>(), out, x.data_ptr<float>(), in, 0.0f,
            dweight.data_ptr<float>(), in);
    }
    if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2)) dbias = dy.sum(0);
    return {dx, dweight, dbias};
  }
};

bool takes_gemm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  const auto f32_cpu = [](const torch::Tensor& t) {
    return t.device().is_cpu() && t.scalar_type() == torch::kFloat32;
  };
  return f32_cpu(x) && f32_cpu(weight) && (!bias.defined() || f32_cpu(bias)) && x.dim() >= 1 &&
         weight.dim() == 2 && x.size(-1) == weight.size(1) && x.numel() > 0 && weight.numel() > 0;
}

}  // namespace

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight,
                     const torch::Tensor& bias) {
  if (takes_gemm(x, weight, bias)) {
    return GemmLinear::apply(x, weight,
                             bias.defined() ? c10::optional<torch::Tensor>(bias) : c10::nullopt);
  }
  return torch::nn::functional::linear(x, weight, bias);
}

}  // namespace kvlab::nn
