#include "nn/gelu.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <vector>

#include "kernels/gelu.h"

namespace kvlab::nn {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// Elements per task: large enough that a task is ~10 µs of work, not a pool hand-off.
constexpr int64_t kGrainElements = 1 << 15;

struct FusedGelu : public torch::autograd::Function<FusedGelu> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_in, bool tanh_form) {
    RECORD_FUNCTION("kvlab::gelu", std::vector<c10::IValue>());
    const torch::Tensor x = x_in.contiguous();
    torch::Tensor y = torch::empty_like(x);
    const GeluForm form = tanh_form ? GeluForm::kTanh : GeluForm::kErf;
    const float* in = x.data_ptr<float>();
    float* out = y.data_ptr<float>();
    at::parallel_for(0, x.numel(), kGrainElements, [&](int64_t begin, int64_t end) {
      gelu_forward(form, in + begin, out + begin, end - begin);
    });
    ctx->save_for_backward({x});
    ctx->saved_data["tanh_form"] = tanh_form;
    return y;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    RECORD_FUNCTION("kvlab::gelu_backward", std::vector<c10::IValue>());
    const torch::Tensor x = ctx->get_saved_variables()[0];
    const torch::Tensor dy = grads[0].contiguous();
    const GeluForm form = ctx->saved_data["tanh_form"].toBool() ? GeluForm::kTanh : GeluForm::kErf;
    torch::Tensor dx = torch::empty_like(x);
    const float* in = x.data_ptr<float>();
    const float* upstream = dy.data_ptr<float>();
    float* out = dx.data_ptr<float>();
    at::parallel_for(0, x.numel(), kGrainElements, [&](int64_t begin, int64_t end) {
      gelu_backward(form, in + begin, upstream + begin, out + begin, end - begin);
    });
    return {dx, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor gelu(const torch::Tensor& x, bool tanh_form) {
  if (x.device().is_cpu() && x.scalar_type() == torch::kFloat32) {
    return FusedGelu::apply(x, tanh_form);
  }
  return torch::gelu(x, tanh_form ? "tanh" : "none");
}

}  // namespace kvlab::nn
