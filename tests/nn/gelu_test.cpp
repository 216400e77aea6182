#include "nn/gelu.h"

#include <gtest/gtest.h>

#include <limits>

namespace kvlab::nn {
namespace {

// A mixture of scales, as pre-activations of an MLP are: most near ±1, a tail out to ±30.
torch::Tensor activations(std::vector<int64_t> shape, uint64_t seed) {
  torch::manual_seed(seed);
  const torch::Tensor scale =
      torch::tensor({0.01f, 0.3f, 1.0f, 3.0f, 10.0f})
          .index({torch::randint(0, 5, shape, torch::TensorOptions().dtype(torch::kLong))});
  return torch::randn(shape) * scale;
}

// The kernel against libtorch's gelu and gelu_backward (its reference twin) on the same f32
// tensor: |Δ| <= 2e-6 · (1 + |x|) for the value, times |upstream gradient| for the gradient.
// libtorch's erf form computes 1 + erf(x/√2), which is 0 in f32 below x ≈ −5.5 where the
// kernel keeps ~6 digits, so the bound is absolute, not relative.
void expect_same_as_libtorch(const torch::Tensor& x_in, bool tanh_form) {
  const torch::Tensor upstream = torch::randn(x_in.sizes());
  const torch::Tensor x_kernel = x_in.detach().clone().requires_grad_(true);
  const torch::Tensor x_torch = x_in.detach().clone().requires_grad_(true);
  const torch::Tensor y_kernel = gelu(x_kernel, tanh_form);
  const torch::Tensor y_torch = torch::gelu(x_torch, tanh_form ? "tanh" : "none");
  (y_kernel * upstream).sum().backward();
  (y_torch * upstream).sum().backward();
  const torch::Tensor bound = 2e-6 * (1 + x_in.abs());
  const torch::Tensor value_error = (y_kernel - y_torch).abs();
  const torch::Tensor gradient_error = (x_kernel.grad() - x_torch.grad()).abs();
  EXPECT_TRUE((value_error <= bound).all().item<bool>())
      << "worst value error " << (value_error - bound).max().item<float>() << " over the bound";
  EXPECT_TRUE((gradient_error <= bound * upstream.abs()).all().item<bool>())
      << "worst gradient error " << (gradient_error - bound * upstream.abs()).max().item<float>()
      << " over the bound";
  EXPECT_EQ(y_kernel.isnan().sum().item<int64_t>(), y_torch.isnan().sum().item<int64_t>());
}

TEST(FusedGeluTest, EqualsLibtorchsGeluAndItsGradientInF32) {
  for (const bool tanh_form : {false, true}) {
    SCOPED_TRACE(tanh_form ? "tanh form" : "erf form");
    expect_same_as_libtorch(activations({3, 7, 129}, 1), tanh_form);   // one task, odd tail
    expect_same_as_libtorch(activations({5, 33, 401}, 2), tanh_form);  // several tasks
  }
}

TEST(FusedGeluTest, NanInNanOutWhereLibtorchGivesNan) {
  torch::Tensor x = activations({4, 37}, 3);
  x.index_put_({1, 5}, std::numeric_limits<float>::quiet_NaN());
  x.index_put_({3, 36}, std::numeric_limits<float>::quiet_NaN());
  for (const bool tanh_form : {false, true}) {
    const torch::Tensor y = gelu(x, tanh_form);
    EXPECT_TRUE(y.isnan().equal(torch::gelu(x, tanh_form ? "tanh" : "none").isnan()));
    EXPECT_EQ(y.isnan().sum().item<int64_t>(), 2);
  }
}

TEST(FusedGeluTest, StridedInputGivesWhatItsContiguousCopyGives) {
  const torch::Tensor x = activations({40, 23}, 4).t();  // [23, 40], not contiguous
  ASSERT_FALSE(x.is_contiguous());
  for (const bool tanh_form : {false, true}) {
    EXPECT_TRUE(gelu(x, tanh_form).equal(gelu(x.contiguous(), tanh_form)));
  }
}

// Only f32 CPU tensors take the kernel; f64 is libtorch's gelu, bit for bit (the f64 tests
// elsewhere hold formulas to 1e-12 through it).
TEST(FusedGeluTest, OtherDtypesAreLibtorchsGelu) {
  const torch::Tensor x = activations({6, 11}, 5).to(torch::kFloat64);
  for (const bool tanh_form : {false, true}) {
    EXPECT_TRUE(gelu(x, tanh_form).equal(torch::gelu(x, tanh_form ? "tanh" : "none")));
  }
}

}  // namespace
}  // namespace kvlab::nn
