// The AVX2 linear-attention step against the scalar reference over many steps, and the
// reference against the math it states.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/fast_decoder.h"

namespace kvlab {
namespace {

TEST(LinearStepTest, OneTokenAttendsToItself) {
  // S = φ(z) zᵀ and s = φ(z) after one step, so out = φᵀ φ zᵀ / (φ · φ) = z
  const std::vector<float> z = {0.5f, -1.25f, 2.0f};
  std::vector<float> state(3 * 3 + 3, 0.0f), out(3);
  linear_step_reference({z.data(), state.data(), out.data(), 1, 1, 3});
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(out[i], z[i], 1e-6);
  EXPECT_FLOAT_EQ(state[9 + 1], std::exp(-1.25f));  // s = φ(z), φ = elu + 1
  EXPECT_FLOAT_EQ(state[0 * 3 + 2], 1.5f * 2.0f);   // S[0][2] = φ(z_0) z_2
}

TEST(LinearStepTest, FastMatchesTheReferenceOverManySteps) {
  if (!cpu_supports(CpuIsa::kAvx2)) GTEST_SKIP() << "no AVX2+FMA on this CPU";
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  FastDecoder fast(2, CpuIsa::kAvx2);
  for (int64_t d : {1, 7, 32, 37, 64, 128}) {
    SCOPED_TRACE("head_dim " + std::to_string(d));
    const int64_t seqs = 2, heads = 3, n = seqs * heads;
    std::vector<float> expected_state(static_cast<size_t>(n * (d * d + d)), 0.0f);
    std::vector<float> actual_state = expected_state;
    std::vector<float> z(static_cast<size_t>(n * d)), expected(z.size()), actual(z.size());
    for (int step = 0; step < 40; ++step) {
      for (float& x : z) x = normal(rng);
      linear_step_reference({z.data(), expected_state.data(), expected.data(), seqs, heads, d});
      fast.run(LinearStepParams{z.data(), actual_state.data(), actual.data(), seqs, heads, d});
      for (size_t i = 0; i < expected.size(); ++i) {
        ASSERT_FALSE(std::isnan(actual[i]));
        ASSERT_NEAR(actual[i], expected[i], 1e-4 * (1.0 + std::fabs(expected[i])))
            << "step " << step << " element " << i;
      }
    }
    for (size_t i = 0; i < expected_state.size(); ++i) {
      ASSERT_NEAR(actual_state[i], expected_state[i], 1e-4 * (1.0 + std::fabs(expected_state[i])));
    }
  }
  EXPECT_THROW(linear_step_reference({}), std::invalid_argument);
}

}  // namespace
}  // namespace kvlab
