#include "kernels/gelu.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace kvlab {
namespace {

// GELU and its derivative in f64, from the definitions: x·Φ(x) with Φ(x) = erfc(−x/√2)/2, and
// GPT-2's 0.5·x·(1 + tanh u), u = √(2/π)(x + 0.044715x³), written as x·σ(2u) (the same
// function: (1 + tanh u)/2 = σ(2u)) because 1 + tanh u rounds to 0 in f64 for u < −19.
double sigmoid_f64(double v) {
  return v >= 0 ? 1 / (1 + std::exp(-v)) : std::exp(v) / (1 + std::exp(v));
}
double tanh_argument(double x) { return std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x); }
double gelu_f64(GeluForm form, double x) {
  if (form == GeluForm::kErf) return x * 0.5 * std::erfc(-x / std::sqrt(2.0));
  return x * sigmoid_f64(2 * tanh_argument(x));
}
double gelu_derivative_f64(GeluForm form, double x) {
  if (form == GeluForm::kErf) {
    return 0.5 * std::erfc(-x / std::sqrt(2.0)) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
  }
  // d/dx 0.5x(1 + tanh u) = 0.5(1 + tanh u) + 0.5x(1 − tanh² u)·u′, with the same σ form
  const double s = sigmoid_f64(2 * tanh_argument(x));
  return s + 2 * x * s * (1 - s) * std::sqrt(2.0 / M_PI) * (1.0 + 3 * 0.044715 * x * x);
}

// Inputs across every regime: around 0, the bulk of activations, both tails (where the
// negative side's values are tiny but not zero), tiny and huge magnitudes; an odd count so the
// vector loops have a tail.
std::vector<float> awkward_inputs(uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> x;
  for (const float scale : {1e-4f, 0.1f, 1.0f, 3.0f, 8.0f, 40.0f}) {
    std::normal_distribution<float> normal(0.0f, scale);
    for (int i = 0; i < 1667; ++i) x.push_back(normal(rng));
  }
  for (float v = -20.0f; v <= 20.0f; v += 0.03125f) x.push_back(v);
  for (const float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e30f, -1e30f, 3e38f, -3e38f}) x.push_back(v);
  return x;
}

// |kernel − f64| <= 1e-5·|exact| + 1e-7·scale, where scale is the size of the terms the value
// is made of (|x| for x·Φ(x); 1 + |x|·φ(x)-sized terms, at most 1 + |x|, for the derivative,
// which is a difference of such terms near x = −0.75): f32 rounding of those terms, and of e^−z²
// in the far negative tail, where the values are tiny but still have most of their digits (a
// plain 1 + erf(x/√2) in f32 is 0 there). The worst errors are printed so a drift shows.
void expect_close_to_f64(GeluForm form, bool derivative) {
  const std::vector<float> x = awkward_inputs(derivative ? 7 : 3);
  const auto n = static_cast<int64_t>(x.size());
  std::vector<float> out(x.size()), upstream(x.size(), 1.0f);
  if (derivative) {
    gelu_backward(form, x.data(), upstream.data(), out.data(), n);
  } else {
    gelu_forward(form, x.data(), out.data(), n);
  }
  double worst_relative = 0, worst_of_scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double exact = derivative ? gelu_derivative_f64(form, x[i]) : gelu_f64(form, x[i]);
    const double scale = derivative ? 1 + std::min(std::fabs(x[i]), 1.0f) : std::fabs(x[i]);
    const double error = std::fabs(out[i] - exact);
    ASSERT_LE(error, 1e-5 * std::fabs(exact) + 1e-7 * scale)
        << "x = " << x[i] << ": kernel " << out[i] << ", exact " << exact;
    if (std::fabs(exact) > 1e-30)
      worst_relative = std::max(worst_relative, error / std::fabs(exact));
    if (scale != 0) worst_of_scale = std::max(worst_of_scale, error / scale);
  }
  std::printf("%zu inputs: worst |error| / |exact| %.3g, worst |error| / scale %.3g\n", x.size(),
              worst_relative, worst_of_scale);
}

TEST(GeluKernelTest, ErfFormEqualsXTimesTheNormalCdfInF64) {
  expect_close_to_f64(GeluForm::kErf, false);
}
TEST(GeluKernelTest, ErfFormDerivativeEqualsCdfPlusXTimesDensityInF64) {
  expect_close_to_f64(GeluForm::kErf, true);
}
TEST(GeluKernelTest, TanhFormEqualsGpt2sFormulaInF64) {
  expect_close_to_f64(GeluForm::kTanh, false);
}
TEST(GeluKernelTest, TanhFormDerivativeEqualsItsDerivativeInF64) {
  expect_close_to_f64(GeluForm::kTanh, true);
}

TEST(GeluKernelTest, BackwardScalesByTheUpstreamGradientAndNanPropagates) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {-1.5f, 0.25f, nan, 2.0f, 0.5f};
  const std::vector<float> dy = {2.0f, -3.0f, 1.0f, nan, 0.0f};
  for (const GeluForm form : {GeluForm::kErf, GeluForm::kTanh}) {
    std::vector<float> y(x.size()), dx(x.size());
    gelu_forward(form, x.data(), y.data(), 5);
    gelu_backward(form, x.data(), dy.data(), dx.data(), 5);
    EXPECT_TRUE(std::isnan(y[2]));
    EXPECT_TRUE(std::isnan(dx[2]));
    EXPECT_TRUE(std::isnan(dx[3]));
    EXPECT_EQ(dx[4], 0.0f);
    for (const size_t i : {size_t{0}, size_t{1}}) {
      EXPECT_NEAR(dx[i], dy[i] * gelu_derivative_f64(form, x[i]), 1e-5);
    }
  }
}

TEST(GeluTest, SwigluGateMatchesSiluInF64) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::vector<float> gate(1003), up(gate.size()), out;
  for (float& v : gate) v = normal(rng);
  for (float& v : up) v = normal(rng);
  gate[0] = -200.0f;  // e^200 would overflow a naive x / (1 + e^−x)
  gate[1] = 200.0f;
  gate[2] = 0.0f;
  out = up;
  swiglu_forward(gate.data(), out.data(), static_cast<int64_t>(out.size()));
  for (size_t i = 0; i < gate.size(); ++i) {
    const double g = gate[i];
    const double expected = up[i] * g / (1.0 + std::exp(-g));
    ASSERT_FALSE(std::isnan(out[i])) << i;
    ASSERT_NEAR(out[i], expected, 1e-6 * std::fabs(expected) + 1e-30) << "gate " << g;
  }
  EXPECT_EQ(out[2], 0.0f);
}

}  // namespace
}  // namespace kvlab
