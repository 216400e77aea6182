// apply_norm (the decode step's RMSNorm and LayerNorm, eight running sums in double) against the
// textbook formula summed in long double, element by element.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "infer/attention_step.h"

namespace kvlab::infer {
namespace {

std::vector<float> textbook_norm(const NormWeights& norm, const std::vector<float>& x) {
  const auto n = static_cast<long double>(x.size());
  long double mean = 0;
  if (norm.kind == NormKind::kLayerNorm) {
    for (float v : x) mean += v;
    mean /= n;
  }
  long double square = 0;
  for (float v : x) square += (v - mean) * (v - mean);
  const long double inv = 1.0L / std::sqrt(square / n + norm.eps);
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    long double v = (x[i] - mean) * inv * norm.weight[i];
    if (!norm.bias.empty()) v += norm.bias[i];
    y[i] = static_cast<float>(v);
  }
  return y;
}

TEST(ApplyNormTest, MatchesTheTextbookFormulaAtEveryWidth) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  for (NormKind kind : {NormKind::kRmsNorm, NormKind::kLayerNorm}) {
    for (int64_t width : {1, 2, 7, 8, 9, 15, 16, 17, 1023, 1024, 1031}) {
      SCOPED_TRACE(std::string(kind == NormKind::kRmsNorm ? "rms" : "layer") + " width " +
                   std::to_string(width));
      NormWeights norm;
      norm.kind = kind;
      norm.width = width;
      norm.eps = 1e-6f;
      for (int64_t i = 0; i < width; ++i) norm.weight.push_back(1.0f + 0.1f * normal(rng));
      if (kind == NormKind::kLayerNorm) {
        for (int64_t i = 0; i < width; ++i) norm.bias.push_back(0.1f * normal(rng));
      }
      std::vector<float> x(static_cast<size_t>(width));
      for (float& v : x) v = 3.0f + 2.0f * normal(rng);  // an offset: LayerNorm's mean matters
      const std::vector<float> expected = textbook_norm(norm, x);
      std::vector<float> y(x.size(), -777.0f);
      apply_norm(norm, x.data(), y.data());
      for (size_t i = 0; i < x.size(); ++i) {
        // double sums in another order: within one f32 rounding of the long-double result
        ASSERT_NEAR(y[i], expected[i], 2e-7f * std::max(1.0f, std::fabs(expected[i]))) << i;
      }
      apply_norm(norm, x.data(), x.data());  // in place
      EXPECT_EQ(x, y);
    }
  }
}

// The decode step's residual add fused into the norm: the same hidden row and the same output as
// the add followed by apply_norm, bit for bit (RMSNorm sums as it adds; LayerNorm adds first).
TEST(ApplyNormTest, AddAndNormEqualsTheAddThenTheNorm) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal;
  for (NormKind kind : {NormKind::kRmsNorm, NormKind::kLayerNorm}) {
    for (int64_t width : {1, 7, 8, 9, 17, 1024, 1031}) {
      for (bool with_residual : {true, false}) {
        SCOPED_TRACE(std::string(kind == NormKind::kRmsNorm ? "rms" : "layer") + " width " +
                     std::to_string(width) + (with_residual ? " residual" : ""));
        NormWeights norm;
        norm.kind = kind;
        norm.width = width;
        for (int64_t i = 0; i < width; ++i) norm.weight.push_back(1.0f + 0.1f * normal(rng));
        if (kind == NormKind::kLayerNorm) norm.bias.assign(static_cast<size_t>(width), 0.25f);
        std::vector<float> h(static_cast<size_t>(width)), residual(h.size());
        for (float& v : h) v = 1.0f + 3.0f * normal(rng);
        for (float& v : residual) v = 0.5f * normal(rng);
        std::vector<float> expected_h = h, expected(h.size()), y(h.size(), -777.0f);
        if (with_residual) {
          for (size_t i = 0; i < h.size(); ++i) expected_h[i] += residual[i];
        }
        apply_norm(norm, expected_h.data(), expected.data());
        add_and_norm(norm, h.data(), with_residual ? residual.data() : nullptr, y.data());
        EXPECT_EQ(h, expected_h);
        EXPECT_EQ(y, expected);
      }
    }
  }
}

TEST(ApplyNormTest, ANanAnywhereMakesTheRowNan) {
  NormWeights norm;
  norm.width = 19;
  norm.weight.assign(19, 1.0f);
  for (int64_t at : {0, 8, 17, 18}) {
    std::vector<float> x(19, 1.0f), y(19, 0.0f);
    x[static_cast<size_t>(at)] = std::numeric_limits<float>::quiet_NaN();
    apply_norm(norm, x.data(), y.data());
    for (float v : y) EXPECT_TRUE(std::isnan(v)) << "NaN at " << at;
  }
}

}  // namespace
}  // namespace kvlab::infer
