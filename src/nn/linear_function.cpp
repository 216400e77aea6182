#include "nn/linear_function.h"

#include <ATen/record_function.h>

#include <vector>

#include "kernels/gemm.h"
#include "spec/spec_error.h"

namespace kvlab::nn {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

std::vector<int64_t> with_last(const torch::Tensor& x, int64_t last) {
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = last;
  return sizes;
}

// C = op(A)·op(B) + beta·C over row-major matrices: sgemm for f32 operands, gemm_bf16 for
// bf16 ones (C is f32 either way).
void product(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
             const torch::Tensor& a, int64_t lda, const torch::Tensor& b, int64_t ldb, float beta,
             torch::Tensor& c, int64_t ldc) {
  if (a.scalar_type() == torch::kBFloat16) {
    gemm_bf16(transpose_a, transpose_b, m, n, k,
              reinterpret_cast<const uint16_t*>(a.data_ptr<at::BFloat16>()), lda,
              reinterpret_cast<const uint16_t*>(b.data_ptr<at::BFloat16>()), ldb, beta,
              c.data_ptr<float>(), ldc);
  } else {
    sgemm(transpose_a, transpose_b, m, n, k, 1.0f, a.data_ptr<float>(), lda, b.data_ptr<float>(),
          ldb, beta, c.data_ptr<float>(), ldc);
  }
}

struct GemmLinear : public torch::autograd::Function<GemmLinear> {
  // (the bias is an optional: an undefined tensor cannot be an autograd function's input)
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_in,
                               const torch::Tensor& weight_in,
                               const c10::optional<torch::Tensor>& bias_in, bool bf16) {
    const torch::Tensor bias = bias_in.value_or(torch::Tensor());
    RECORD_FUNCTION("kvlab::linear", std::vector<c10::IValue>());
    const int64_t in = weight_in.size(1), out = weight_in.size(0);
    torch::Tensor x = x_in.reshape({-1, in}).contiguous();  // [M, in]
    torch::Tensor weight = weight_in.contiguous();          // [out, in]
    if (bf16) {  // operands rounded to nearest even; the master weights stay f32
      x = x.to(torch::kBFloat16);
      weight = weight.to(torch::kBFloat16);
    }
    const int64_t m = x.size(0);
    // [M, out]; clone, not contiguous(): for M = 1 the expanded bias already counts as
    // contiguous, and the product would be written into the bias itself
    torch::Tensor y =
        bias.defined() ? bias.expand({m, out}).clone() : torch::empty({m, out}, x_in.options());
    product(false, true, m, out, in, x, in, weight, in, bias.defined() ? 1.0f : 0.0f, y, out);
    ctx->save_for_backward({x, weight});
    ctx->saved_data["x_sizes"] = x_in.sizes().vec();
    ctx->saved_data["has_bias"] = bias.defined();
    return y.view(with_last(x_in, out));
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    RECORD_FUNCTION("kvlab::linear_backward", std::vector<c10::IValue>());
    const tensor_list saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &weight = saved[1];  // [M, in], [out, in]; f32 or bf16
    const int64_t m = x.size(0), in = x.size(1), out = weight.size(0);
    const torch::Tensor dy = grads[0].reshape({m, out}).contiguous();  // [M, out], f32
    const torch::Tensor dy_operand = dy.to(x.scalar_type());
    torch::Tensor dx, dweight, dbias;
    if (ctx->needs_input_grad(0)) {
      dx = torch::empty({m, in}, dy.options());  // dy·W
      product(false, false, m, in, out, dy_operand, out, weight, in, 0.0f, dx, in);
      dx = dx.view(ctx->saved_data["x_sizes"].toIntVector());
    }
    if (ctx->needs_input_grad(1)) {
      dweight = torch::empty({out, in}, dy.options());  // dyᵀ·x
      product(true, false, out, in, m, dy_operand, out, x, in, 0.0f, dweight, in);
    }
    if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2)) dbias = dy.sum(0);
    return {dx, dweight, dbias, torch::Tensor()};
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

MatmulPrecision parse_matmul_precision(const std::string& text) {
  if (text == "f32") return MatmulPrecision::kF32;
  if (text == "bf16") {
    if (!bf16_gemm_native()) {
      throw SpecError("matmul-precision",
                      "bf16 needs a CPU that multiplies bf16 in hardware (AVX-512 BF16 or AMX); "
                      "this one runs " +
                          gemm_description() + ": use f32");
    }
    return MatmulPrecision::kBf16;
  }
  throw SpecError("matmul-precision", "'" + text + "' is not a precision (f32 | bf16)");
}

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                     MatmulPrecision precision) {
  if (takes_gemm(x, weight, bias)) {
    return GemmLinear::apply(x, weight,
                             bias.defined() ? c10::optional<torch::Tensor>(bias) : c10::nullopt,
                             precision == MatmulPrecision::kBf16);
  }
  return torch::nn::functional::linear(x, weight, bias);
}

}  // namespace kvlab::nn
