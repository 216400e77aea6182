#include "nn/linear_function.h"

#include <gtest/gtest.h>

#include "kernels/gemm.h"
#include "spec/spec_error.h"

namespace kvlab::nn {
namespace {

struct LinearCase {
  std::vector<int64_t> x_shape;
  int64_t out;
  bool bias;
  bool x_needs_grad;
  bool strided_x;  // x a transposed view (not contiguous)
};

// The gemm path against libtorch's linear (its reference twin) on the same f32 tensors:
// y, dx, dW, db with |Δ| <= 1e-5 · (1 + the largest |value| of the reference) — a sum of up to
// `in` (or M, for dW) f32 products rounded in another order.
void expect_same_as_libtorch(const LinearCase& c, uint64_t seed) {
  torch::manual_seed(seed);
  const int64_t in = c.x_shape.back();
  torch::Tensor x = torch::randn(c.x_shape);
  if (c.strided_x) {
    std::vector<int64_t> swapped = c.x_shape;
    std::swap(swapped.front(), swapped.back());
    x = torch::randn(swapped).transpose(0, static_cast<int64_t>(swapped.size()) - 1);
    ASSERT_FALSE(x.is_contiguous());
  }
  const torch::Tensor w = torch::randn({c.out, in}) / std::sqrt(static_cast<double>(in));
  const torch::Tensor b = c.bias ? torch::randn({c.out}) : torch::Tensor();
  std::vector<int64_t> y_shape = c.x_shape;
  y_shape.back() = c.out;
  const torch::Tensor upstream = torch::randn(y_shape);

  const auto run = [&](bool gemm) {
    const torch::Tensor xr = x.detach().clone().requires_grad_(c.x_needs_grad);
    const torch::Tensor xi = c.strided_x ? xr : xr.contiguous();
    const torch::Tensor wr = w.detach().clone().requires_grad_(true);
    const torch::Tensor br = c.bias ? b.detach().clone().requires_grad_(true) : torch::Tensor();
    const torch::Tensor y = gemm ? linear(xi, wr, br) : torch::nn::functional::linear(xi, wr, br);
    // the inputs are read, never written (with one token, an expanded bias once took the output)
    EXPECT_TRUE(xr.equal(x) && wr.equal(w) && (!c.bias || br.equal(b)));
    (y * upstream).sum().backward();
    return std::vector<torch::Tensor>{y.detach(), c.x_needs_grad ? xr.grad() : torch::Tensor(),
                                      wr.grad(), c.bias ? br.grad() : torch::Tensor()};
  };
  const std::vector<torch::Tensor> ours = run(true), theirs = run(false);
  const char* names[] = {"y", "dx", "dW", "db"};
  for (size_t i = 0; i < ours.size(); ++i) {
    ASSERT_EQ(ours[i].defined(), theirs[i].defined()) << names[i];
    if (!ours[i].defined()) continue;
    ASSERT_EQ(ours[i].sizes(), theirs[i].sizes()) << names[i];
    ASSERT_FALSE(ours[i].isnan().any().item<bool>()) << names[i];
    const double scale = 1 + theirs[i].abs().max().item<double>();
    EXPECT_LE((ours[i] - theirs[i]).abs().max().item<double>(), 1e-5 * scale) << names[i];
  }
}

TEST(GemmLinearTest, OutputAndGradientsEqualLibtorchsLinear) {
  const std::vector<LinearCase> cases = {
      {{32, 128, 128}, 384, true, true, false},  // a projection of the bench train model
      {{3, 29, 17}, 13, true, true, false},      // odd everything
      {{1, 1, 5}, 7, false, true, false},        // one token, no bias (a tied LM head)
      {{1, 1, 9}, 4, true, true, false},         // one token with a bias (a decode step)
      {{37, 11}, 1, true, true, false},          // 2-D input, one output
      {{4, 9, 6}, 10, true, false, false},       // frozen input: no dx
      {{6, 5, 33}, 19, false, true, true},       // strided input
  };
  uint64_t seed = 11;
  for (const LinearCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << "x " << c.x_shape.size() << "-D, last " << c.x_shape.back()
                                      << ", out " << c.out << (c.bias ? ", bias" : ", no bias"));
    expect_same_as_libtorch(c, seed++);
  }
}

// bf16 precision: the products of the operands rounded to bf16 (nearest even), summed in f32.
// Oracle: the same roundings done here by libtorch's conversion, then the products in f64 —
// so what is left is f32 summation error, not bf16's (which is ~100× larger, and shows: the
// f32 path's output differs from it by far more than the bound).
TEST(GemmLinearTest, Bf16PrecisionIsTheProductOfRoundedOperandsWithF32Sums) {
  if (!bf16_gemm_native())
    GTEST_SKIP() << "this CPU has no AVX-512 BF16 or AMX: " << gemm_description();
  torch::manual_seed(21);
  const auto rounded = [](const torch::Tensor& t) {
    return t.to(torch::kBFloat16).to(torch::kFloat64);
  };
  for (const bool bias : {true, false}) {
    const torch::Tensor x = torch::randn({3, 37, 45}).requires_grad_(true);
    const torch::Tensor w = (torch::randn({29, 45}) / std::sqrt(45.0)).requires_grad_(true);
    const torch::Tensor b = bias ? torch::randn({29}).requires_grad_(true) : torch::Tensor();
    const torch::Tensor upstream = torch::randn({3, 37, 29});
    const torch::Tensor y = linear(x, w, b, MatmulPrecision::kBf16);
    (y * upstream).sum().backward();
    torch::Tensor expected = torch::matmul(rounded(x), rounded(w).t());
    if (bias) expected = expected + b.detach().to(torch::kFloat64);
    const torch::Tensor dy = rounded(upstream).reshape({-1, 29});
    const torch::Tensor expected_dx = torch::matmul(dy, rounded(w)).reshape({3, 37, 45});
    const torch::Tensor expected_dw = torch::matmul(dy.t(), rounded(x).reshape({-1, 45}));
    const auto error = [](const torch::Tensor& got, const torch::Tensor& want) {
      return (got.to(torch::kFloat64) - want).abs().max().item<double>() /
             (1 + want.abs().max().item<double>());
    };
    EXPECT_LT(error(y.detach(), expected), 2e-6);
    EXPECT_LT(error(x.grad(), expected_dx), 2e-6);
    EXPECT_LT(error(w.grad(), expected_dw), 2e-6);
    if (bias) {
      EXPECT_LT(error(b.grad(), upstream.sum(std::vector<int64_t>{0, 1}).to(torch::kFloat64)),
                2e-6);
    }
    // the f32 path is not within this bound of the rounded operands' product
    EXPECT_GT(error(linear(x, w, b).detach(), expected), 2e-4);
  }
}

TEST(GemmLinearTest, PrecisionNamesAreCheckedByField) {
  EXPECT_EQ(parse_matmul_precision("f32"), MatmulPrecision::kF32);
  try {
    parse_matmul_precision("fp16");
    ADD_FAILURE() << "fp16 was taken";
  } catch (const SpecError& e) {
    EXPECT_EQ(e.field(), "matmul-precision");
  }
  if (bf16_gemm_native()) {
    EXPECT_EQ(parse_matmul_precision("bf16"), MatmulPrecision::kBf16);
  } else {
    EXPECT_THROW(parse_matmul_precision("bf16"), SpecError);
  }
}

// What the gemm path does not take is libtorch's linear itself, bit for bit.
TEST(GemmLinearTest, F64AndEmptyInputsAreLibtorchsLinear) {
  torch::manual_seed(3);
  const torch::Tensor x = torch::randn({4, 6}, torch::kFloat64);
  const torch::Tensor w = torch::randn({5, 6}, torch::kFloat64);
  const torch::Tensor b = torch::randn({5}, torch::kFloat64);
  EXPECT_TRUE(linear(x, w, b).equal(torch::nn::functional::linear(x, w, b)));
  const torch::Tensor empty = torch::randn({0, 6});
  EXPECT_EQ(linear(empty, w.to(torch::kFloat32), b.to(torch::kFloat32)).sizes(),
            (std::vector<int64_t>{0, 5}));
}

}  // namespace
}  // namespace kvlab::nn
