// The AVX2 matrix-vector kernel of the decode step's dense layers against the scalar
// reference, over odd shapes, strides and batch sizes; the reference against a hand value.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/fast_decoder.h"

namespace kvlab {
namespace {

TEST(MatVecTest, ReferenceComputesWxPlusB) {
  const std::vector<float> w = {1, 2, 3, 4, 5, 6};  // [2][3]
  const std::vector<float> b = {0.5f, -1};
  const std::vector<float> x = {1, 0, -1, 9, 2, 1, 1, 9};  // two rows, stride 4
  std::vector<float> y(2 * 2);
  matvec_reference({w.data(), b.data(), x.data(), y.data(), 2, 3, 2, 4, 2});
  EXPECT_FLOAT_EQ(y[0], 1 - 3 + 0.5f);
  EXPECT_FLOAT_EQ(y[1], 4 - 6 - 1.0f);
  EXPECT_FLOAT_EQ(y[2], 2 + 2 + 3 + 0.5f);
  EXPECT_FLOAT_EQ(y[3], 8 + 5 + 6 - 1.0f);
  EXPECT_THROW(matvec_reference({}), std::invalid_argument);
  EXPECT_THROW(matvec_reference({w.data(), nullptr, x.data(), y.data(), 2, 3, 2, 2, 0}),
               std::invalid_argument);  // x_stride < in
}

TEST(MatVecTest, FastMatchesTheReference) {
  if (!cpu_supports(CpuIsa::kAvx2)) GTEST_SKIP() << "no AVX2+FMA on this CPU";
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  FastDecoder fast(2, CpuIsa::kAvx2);
  for (int64_t in : {1, 7, 8, 17, 64, 90, 513}) {
    for (int64_t out : {1, 3, 4, 5, 33, 1000}) {
      for (int64_t n : {1, 3}) {
        for (bool bias : {false, true}) {
          SCOPED_TRACE("in " + std::to_string(in) + " out " + std::to_string(out) + " n " +
                       std::to_string(n) + (bias ? " bias" : ""));
          const int64_t x_stride = in + 3, y_stride = out + 2;  // rows inside wider buffers
          std::vector<float> w(static_cast<size_t>(in * out)), b(static_cast<size_t>(out));
          std::vector<float> x(static_cast<size_t>(n * x_stride));
          for (float& v : w) v = normal(rng);
          for (float& v : b) v = normal(rng);
          for (float& v : x) v = normal(rng);
          const float sentinel = -777.0f;
          std::vector<float> expected(static_cast<size_t>(n * y_stride), sentinel);
          std::vector<float> actual = expected;
          MatVecParams p{
              w.data(), bias ? b.data() : nullptr, x.data(), expected.data(), n, in, out, x_stride,
              y_stride};
          matvec_reference(p);
          p.y = actual.data();
          fast.run(p);
          for (size_t i = 0; i < actual.size(); ++i) {
            ASSERT_FALSE(std::isnan(actual[i])) << i;
            // f32 sums of `in` products against double: error grows like sqrt(in)
            ASSERT_NEAR(actual[i], expected[i],
                        1e-5 * std::sqrt(static_cast<double>(in)) * (1.0 + std::fabs(expected[i])))
                << "element " << i;
          }
          for (int64_t r = 0; r < n; ++r) {  // padding between rows untouched
            ASSERT_EQ(actual[static_cast<size_t>(r * y_stride + out)], sentinel);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvlab
