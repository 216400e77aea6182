// The matrix-vector kernels of the decode step's dense layers (AVX2, AVX-512, AVX-512 BF16's
// bf16 products over rows and panels, interleaved q8_0) against the scalar reference, for every
// weight dtype, over odd shapes, strides and batch sizes; the reference against a hand value; the
// q8_0 rounding of the input against a bound computed here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <random>

#include "kernels/convert.h"
#include "kernels/fast_decoder.h"
#include "kernels/gemm.h"
#include "thrown_message.h"

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

// Weights [out][in] as rows of `dtype` (store_rows: rounded, or quantized per block).
std::vector<std::byte> pack(const std::vector<float>& w, int64_t out, int64_t in, DType dtype) {
  std::vector<std::byte> rows(static_cast<size_t>(out * row_bytes(dtype, in)));
  store_rows(w.data(), out, in, dtype, rows.data());
  return rows;
}

constexpr DType kWeightDtypes[] = {DType::kF32, DType::kBf16, DType::kF16, DType::kQ8_0,
                                   DType::kQ4_0};

// Every SIMD level the dense layers have, skipped where the CPU lacks it (AVX-512's block dtypes
// also need VNNI: matvec_runs_avx512).
class MatVecIsaTest : public ::testing::TestWithParam<CpuIsa> {
 protected:
  void SetUp() override {
    if (!cpu_supports(GetParam())) {
      GTEST_SKIP() << "this CPU has no " << cpu_isa_name(GetParam());
    }
  }
};

INSTANTIATE_TEST_SUITE_P(Isa, MatVecIsaTest, ::testing::Values(CpuIsa::kAvx2, CpuIsa::kAvx512),
                         [](const auto& isa) { return std::string(cpu_isa_name(isa.param)); });

TEST_P(MatVecIsaTest, FastMatchesTheReferenceForEveryWeightDtype) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  FastDecoder fast(2, GetParam());
  for (DType dtype : kWeightDtypes) {
    if (GetParam() == CpuIsa::kAvx512 && !fast.matvec_runs_avx512(dtype)) {
      std::cout << "[ SKIPPED  ] " << dtype_name(dtype) << " runs AVX2 here (no AVX-512 VNNI)\n";
      continue;
    }
    for (int64_t in : {1, 7, 8, 17, 64, 90, 513}) {
      for (int64_t out : {1, 3, 4, 5, 33, 1000}) {
        for (int64_t n : {1, 2, 3, 5, 9}) {
          for (bool bias : {false, true}) {
            SCOPED_TRACE(std::string(dtype_name(dtype)) + " in " + std::to_string(in) + " out " +
                         std::to_string(out) + " n " + std::to_string(n) + (bias ? " bias" : ""));
            const int64_t x_stride = in + 3, y_stride = out + 2;  // rows inside wider buffers
            std::vector<float> w(static_cast<size_t>(in * out)), b(static_cast<size_t>(out));
            std::vector<float> x(static_cast<size_t>(n * x_stride));
            for (float& v : w) v = normal(rng);
            for (float& v : b) v = normal(rng);
            for (float& v : x) v = normal(rng);
            const std::vector<std::byte> rows = pack(w, out, in, dtype);
            const float sentinel = -777.0f;
            std::vector<float> expected(static_cast<size_t>(n * y_stride), sentinel);
            std::vector<float> actual = expected;
            MatVecParams p{rows.data(), bias ? b.data() : nullptr,
                           x.data(),    expected.data(),
                           n,           in,
                           out,         x_stride,
                           y_stride,    dtype};
            // bf16 products (matvec_runs_bf16_products) multiply x rounded to bf16
            std::vector<float> rounded = x;
            if (fast.matvec_runs_bf16_products(p)) {
              for (float& v : rounded) v = bf16_to_f32(f32_to_bf16(v));
            }
            p.x = rounded.data();
            matvec_reference(p);
            p.x = x.data();
            p.y = actual.data();
            fast.run(p);
            for (size_t i = 0; i < actual.size(); ++i) {
              ASSERT_FALSE(std::isnan(actual[i])) << i;
              // f32 sums of `in` products against double: error grows like sqrt(in)
              ASSERT_NEAR(
                  actual[i], expected[i],
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
}

// For q8_0 / q4_0 weights x is rounded to q8_0 blocks: each element moves by at most half its
// block's step d_x, so |y − W̃ x| ≤ Σ_k (d_x,k / 2) Σ_{i in k} |w̃_i| (W̃: the weights as stored,
// read back), plus f32 rounding. An absolute bound computed here, not by the reference.
TEST_P(MatVecIsaTest, RoundingTheInputToQ8_0StaysWithinHalfAStep) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  FastDecoder fast(1, GetParam());
  const int64_t in = 200, out = 37;
  for (DType dtype : {DType::kQ8_0, DType::kQ4_0}) {
    std::vector<float> w(static_cast<size_t>(in * out)), x(static_cast<size_t>(in));
    for (float& v : w) v = normal(rng);
    for (float& v : x) v = 3.0f * normal(rng);
    const std::vector<std::byte> rows = pack(w, out, in, dtype);
    std::vector<float> stored(w.size()), y(static_cast<size_t>(out));
    load_rows(rows.data(), out, in, dtype, stored.data());
    fast.run(MatVecParams{rows.data(), nullptr, x.data(), y.data(), 1, in, out, 0, 0, dtype});
    int64_t loose = 0;
    for (int64_t o = 0; o < out; ++o) {
      double exact = 0, bound = 1e-4;
      for (int64_t k = 0; k * 32 < in; ++k) {
        float amax = 0;
        for (int64_t i = k * 32; i < std::min(in, k * 32 + 32); ++i)
          amax = std::max(amax, std::fabs(x[i]));
        const double half_step = amax / 127.0 / 2.0 * 1.001;  // the f16 scale's rounding
        for (int64_t i = k * 32; i < std::min(in, k * 32 + 32); ++i) {
          exact += static_cast<double>(stored[o * in + i]) * x[i];
          bound += half_step * std::fabs(stored[o * in + i]);
        }
      }
      ASSERT_LE(std::fabs(y[o] - exact), bound) << dtype_name(dtype) << " row " << o;
      if (std::fabs(y[o] - exact) > 1e-3) ++loose;
    }
    EXPECT_GT(loose, 0) << "the input was not rounded at all";  // the bound is not vacuous
  }
}

TEST_P(MatVecIsaTest, NanInputsStayNanAndFp8WeightsAreRefused) {
  FastDecoder fast(1, GetParam());
  const int64_t in = 40, out = 5;
  std::vector<float> w(static_cast<size_t>(in * out), 0.5f), x(static_cast<size_t>(2 * in), 1.0f);
  x[3] = NAN;  // first row only
  for (DType dtype : kWeightDtypes) {
    const std::vector<std::byte> rows = pack(w, out, in, dtype);
    std::vector<float> y(static_cast<size_t>(2 * out)), ref(y.size());
    MatVecParams p{rows.data(), nullptr, x.data(), y.data(), 2, in, out, 0, 0, dtype};
    fast.run(p);
    p.y = ref.data();
    matvec_reference(p);
    for (int64_t o = 0; o < out; ++o) {
      EXPECT_TRUE(std::isnan(y[o])) << dtype_name(dtype);
      EXPECT_TRUE(std::isnan(ref[o])) << dtype_name(dtype);
      EXPECT_NEAR(y[out + o], ref[out + o], 1e-4) << dtype_name(dtype);
      EXPECT_FALSE(std::isnan(y[out + o])) << dtype_name(dtype);
    }
  }
  std::vector<float> y(out);
  EXPECT_THROW(
      fast.run(MatVecParams{w.data(), nullptr, x.data(), y.data(), 1, in, out, 0, 0, DType::kFp8}),
      std::invalid_argument);
}

// From bf16_product_min_rows() rows, bf16 weights on a CPU with hardware bf16 products multiply
// x rounded to bf16 (AVX-512 BF16's kernel; with AMX, oneDNN's matmul from kBf16GemmMinRows):
// the reference on the rounded x, to f32 sums; below it the widening kernels keep x in f32.
// f32 weight rows from kF32GemmMinRows rows of x go through oneDNN's sgemm (a prompt's chunk, a
// wide batch): called directly and through the decoder, against the reference over odd shapes,
// strides and a bias; a NaN in x stays in its own row; the padding between rows untouched.
TEST(MatVecTest, F32GemmMatchesTheReference) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  FastDecoder fast(2, detect_cpu_isa());
  for (int64_t n : {kF32GemmMinRows - 1, kF32GemmMinRows, int64_t{37}, int64_t{130}}) {
    for (auto [in, out] : {std::pair<int64_t, int64_t>{70, 45}, {513, 33}, {17, 1000}}) {
      SCOPED_TRACE("n " + std::to_string(n) + " in " + std::to_string(in) + " out " +
                   std::to_string(out));
      const int64_t x_stride = in + 3, y_stride = out + 2;
      std::vector<float> w(static_cast<size_t>(in * out)), b(static_cast<size_t>(out));
      std::vector<float> x(static_cast<size_t>(n * x_stride));
      for (float& v : w) v = normal(rng);
      for (float& v : b) v = normal(rng);
      for (float& v : x) v = normal(rng);
      constexpr int64_t kNanRow = 5;
      x[static_cast<size_t>(kNanRow * x_stride + in / 2)] = NAN;
      const float sentinel = -777.0f;
      std::vector<float> expected(static_cast<size_t>(n * y_stride), sentinel);
      std::vector<float> direct = expected, decoded = expected;
      MatVecParams p{w.data(), b.data(), x.data(), expected.data(), n,
                     in,       out,      x_stride, y_stride,        DType::kF32};
      if (fast.isa() != CpuIsa::kScalar) {
        EXPECT_EQ(fast.matvec_runs_f32_gemm(p), n >= kF32GemmMinRows);
      }
      matvec_reference(p);
      p.y = direct.data();
      matvec_gemm_f32(p);
      p.y = decoded.data();
      fast.run(p);
      for (const std::vector<float>* actual : {&direct, &decoded}) {
        for (int64_t r = 0; r < n; ++r) {
          for (int64_t o = 0; o < out; ++o) {
            const auto i = static_cast<size_t>(r * y_stride + o);
            if (r == kNanRow) {
              ASSERT_TRUE(std::isnan((*actual)[i])) << "row " << r << " output " << o;
              continue;
            }
            ASSERT_FALSE(std::isnan((*actual)[i])) << "row " << r << " output " << o;
            ASSERT_NEAR((*actual)[i], expected[i],
                        1e-5 * std::sqrt(static_cast<double>(in)) * (1.0 + std::fabs(expected[i])))
                << "row " << r << " output " << o;
          }
          ASSERT_EQ((*actual)[static_cast<size_t>(r * y_stride + out)], sentinel) << r;
        }
      }
    }
  }
  std::vector<std::byte> bf16(static_cast<size_t>(2 * 4 * 8));
  std::vector<float> x(8), y(4);
  const MatVecParams not_f32{bf16.data(), nullptr, x.data(), y.data(), 1, 8, 4, 0, 0, DType::kBf16};
  EXPECT_EQ(thrown_message([&] { matvec_gemm_f32(not_f32); }),
            "matvec_gemm_f32: weight_dtype: must be f32");
}

TEST(MatVecTest, Bf16ProductsMatchTheReferenceOnRoundedInputs) {
  const int64_t min_rows = bf16_product_min_rows();
  if (min_rows == 0) GTEST_SKIP() << "no hardware bf16 products (AVX-512 BF16 or AMX) on this CPU";
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  FastDecoder fast(2, detect_cpu_isa());
  for (int64_t n : {min_rows - 1, min_rows, int64_t{4}, int64_t{16}, int64_t{37}}) {
    // at 37 rows x is large enough (33,300 elements) to be rounded on the pool
    const int64_t in = n == 37 ? 900 : 70, out = 45, x_stride = in + 2, y_stride = out + 3;
    std::vector<float> w(static_cast<size_t>(in * out)), b(static_cast<size_t>(out));
    std::vector<float> x(static_cast<size_t>(n * x_stride));
    for (float& v : w) v = normal(rng);
    for (float& v : b) v = normal(rng);
    for (float& v : x) v = normal(rng);
    const std::vector<std::byte> rows = pack(w, out, in, DType::kBf16);
    MatVecParams p{rows.data(), b.data(), x.data(), nullptr,  n,
                   in,          out,      x_stride, y_stride, DType::kBf16};
    EXPECT_EQ(fast.matvec_runs_bf16_products(p), n >= min_rows) << n;
    std::vector<float> rounded = x;
    if (n >= min_rows) {
      for (float& v : rounded) v = bf16_to_f32(f32_to_bf16(v));
    }
    std::vector<float> actual(static_cast<size_t>(n * y_stride), -777.0f), expected = actual;
    p.y = actual.data();
    fast.run(p);
    p.x = rounded.data();
    p.y = expected.data();
    matvec_reference(p);
    for (size_t i = 0; i < actual.size(); ++i) {
      ASSERT_FALSE(std::isnan(actual[i])) << i;
      ASSERT_NEAR(actual[i], expected[i], 1e-4 * (1.0 + std::fabs(expected[i])))
          << "n " << n << " element " << i;
    }
  }
}

// The bf16 products round x to nearest even as f32_to_bf16 does: through an identity matrix,
// y is x rounded, exactly — ties both ways, just above and below them, signs, a NaN (stays NaN).
// (vdpbf16ps treats bf16 subnormals as zero, so none is used here.)
TEST(MatVecTest, Bf16ProductsRoundTheInputToNearestEven) {
  if (!cpu_supports(CpuIsa::kAvx512) || !cpu_has_avx512_bf16()) {
    GTEST_SKIP() << "no AVX-512 BF16 on this CPU";
  }
  const float tie_down = 1.0f + std::ldexp(1.0f, -8);    // halfway 1 and 1 + 2^-7: to 1 (even)
  const float tie_up = 1.0f + 3 * std::ldexp(1.0f, -8);  // halfway, to 1 + 2^-6 (even)
  const std::vector<float> values = {tie_down,
                                     tie_up,
                                     -tie_down,
                                     std::nextafter(tie_down, 2.0f),
                                     std::nextafter(tie_down, 0.0f),
                                     3.14159265f,
                                     -1e30f,
                                     1e-30f,
                                     0.0f,
                                     -0.0f,
                                     65504.0f,
                                     -2.5e-3f};
  const int64_t in = 45, out = in, n = 3;  // a tail chunk, and three rows of x: two tiles
  std::vector<float> identity(static_cast<size_t>(in * out), 0.0f);
  for (int64_t i = 0; i < in; ++i) identity[static_cast<size_t>(i * in + i)] = 1.0f;
  const std::vector<std::byte> rows = pack(identity, out, in, DType::kBf16);
  std::vector<float> x(static_cast<size_t>(n * in)), y(x.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = values[i % values.size()] * (i % 7 == 3 ? -1 : 1);
  x[static_cast<size_t>(in + 5)] = NAN;  // second row
  ThreadPool pool(2);
  MatVecScratch scratch;
  matvec_bf16_products({rows.data(), nullptr, x.data(), y.data(), n, in, out, 0, 0, DType::kBf16},
                       pool, scratch);
  for (size_t i = 0; i < x.size(); ++i) {
    if (static_cast<int64_t>(i) / in == 1) {  // the row with the NaN: 0 · NaN in every sum
      EXPECT_TRUE(std::isnan(y[i])) << i;
      continue;
    }
    EXPECT_EQ(y[i], bf16_to_f32(f32_to_bf16(x[i]))) << "x " << x[i] << " at " << i;
  }
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(tie_down)), 1.0f);  // the test's ties are ties
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(tie_up)), 1.0f + std::ldexp(1.0f, -6));
}

// A reordered layout's test case: normal weights [out][in] (and as rows of `dtype`: what the
// layout is packed from and the reference reads), bias [out], n rows of x and of y inside wider
// buffers (x_stride in + 3, y_stride out + 2); with three rows (or 35: three blocks of 16), a NaN
// in row 1 only.
bool has_nan_row(int64_t n) { return n == 3 || n == 35; }
struct RandomProblem {
  int64_t in, out, n, x_stride, y_stride;
  DType dtype;
  std::vector<float> w, b, x;
  std::vector<std::byte> rows;
  std::string name() const {
    return "in " + std::to_string(in) + " out " + std::to_string(out) + " n " + std::to_string(n);
  }
  // y's rows, every element a value no kernel writes
  std::vector<float> untouched_y() const {
    return std::vector<float>(static_cast<size_t>(n * y_stride), -777.0f);
  }
  // the problem with `weight` (rows, or a reordering of them) into y
  MatVecParams params(const void* weight, WeightOrder order, float* y) const {
    MatVecParams p{weight, b.data(), x.data(), y, n, in, out, x_stride, y_stride, dtype};
    p.weight_order = order;
    return p;
  }
};
RandomProblem random_problem(std::mt19937& rng, int64_t in, int64_t out, int64_t n, DType dtype) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  RandomProblem r{in,
                  out,
                  n,
                  in + 3,
                  out + 2,
                  dtype,
                  std::vector<float>(static_cast<size_t>(in * out)),
                  std::vector<float>(static_cast<size_t>(out)),
                  std::vector<float>(static_cast<size_t>(n * (in + 3))),
                  {}};
  for (std::vector<float>* values : {&r.w, &r.b, &r.x}) {
    for (float& v : *values) v = normal(rng);
  }
  if (has_nan_row(n)) r.x[static_cast<size_t>(r.x_stride + in / 2)] = NAN;
  r.rows = pack(r.w, out, in, dtype);
  return r;
}

// A reordered layout's results (WeightOrder) against the reference on plain rows, `expected`:
// the reference reading the reordered weights equal to it exactly, the decoder within f32
// rounding of `in` products, NaN where it is NaN (random_problem's row 1).
void expect_reordered_matches(const std::vector<float>& expected,
                              const std::vector<float>& read_back, const std::vector<float>& actual,
                              int64_t in, int64_t n, int64_t y_stride) {
  if (has_nan_row(n)) {
    ASSERT_TRUE(std::isnan(actual[static_cast<size_t>(y_stride)]));
  }
  for (size_t i = 0; i < actual.size(); ++i) {
    if (std::isnan(expected[i])) {
      ASSERT_TRUE(std::isnan(actual[i]) && std::isnan(read_back[i])) << i;
      continue;
    }
    ASSERT_FALSE(std::isnan(actual[i])) << i;
    ASSERT_EQ(read_back[i], expected[i]) << i;
    ASSERT_NEAR(actual[i], expected[i],
                1e-5 * std::sqrt(static_cast<double>(in)) * (1.0 + std::fabs(expected[i])))
        << "element " << i;
  }
}

// bf16 panels move elements only: every element of odd shapes (a partial last panel, an input
// width that is no multiple of 32) reads back at bf16_panel_index, the padding is zero, and the
// order is not rows'.
TEST(MatVecTest, Bf16PanelsReadBackExactly) {
  std::mt19937 rng(29);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t out : {1, 15, 16, 17, 40}) {
    for (int64_t in : {1, 2, 3, 31, 64, 65}) {
      SCOPED_TRACE("out " + std::to_string(out) + " in " + std::to_string(in));
      std::vector<uint16_t> rows(static_cast<size_t>(out * in));
      for (uint16_t& v : rows) v = f32_to_bf16(normal(rng));
      const int64_t bytes = bf16_panel_bytes(out, in);
      ASSERT_EQ(bytes, (out + 15) / 16 * 16 * ((in + 31) / 32 * 32) * 2);
      std::vector<uint16_t> panels(static_cast<size_t>(bytes / 2), 0xFFFF);
      pack_bf16_panels(rows.data(), out, in, reinterpret_cast<std::byte*>(panels.data()));
      std::vector<bool> used(panels.size(), false);
      for (int64_t o = 0; o < out; ++o) {
        for (int64_t i = 0; i < in; ++i) {
          const auto at = static_cast<size_t>(bf16_panel_index(in, o, i));
          ASSERT_FALSE(used[at]) << "two elements at " << at;
          used[at] = true;
          ASSERT_EQ(panels[at], rows[static_cast<size_t>(o * in + i)]) << o << ", " << i;
        }
      }
      for (size_t at = 0; at < panels.size(); ++at) {
        if (!used[at]) {
          ASSERT_EQ(panels[at], 0) << "padding at " << at;
        }
      }
      // row 0's second element sits right after its first (a pair); row 1's first 2 elements on
      if (out >= 2 && in >= 2) {
        EXPECT_EQ(panels[1], rows[1]);
        EXPECT_EQ(panels[2], rows[static_cast<size_t>(in)]);
      }
    }
  }
  std::vector<std::byte> none(64);
  EXPECT_THROW(pack_bf16_panels(nullptr, 0, 4, none.data()), std::invalid_argument);
}

// random_problem's weights packed in the panels of their dtype (bf16's pair order, or f32's and
// f16's), through `decoder` against the reference on plain rows (expect_reordered_matches); x
// stays f32, so the panels' kernels differ from the reference only in the order of the sums.
void expect_panels_match_rows(FastDecoder& decoder, std::mt19937& rng, DType dtype, int64_t in,
                              int64_t out, int64_t n) {
  const RandomProblem r = random_problem(rng, in, out, n, dtype);
  SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + r.name() + ", " +
               std::to_string(decoder.pool().size()) + " threads");
  std::vector<std::byte> panels(static_cast<size_t>(panel_bytes(dtype, out, in)));
  pack_panels(dtype, r.rows.data(), out, in, panels.data());
  std::vector<float> expected = r.untouched_y(), actual = expected, read_back = expected;
  MatVecParams p = r.params(panels.data(), WeightOrder::kPanels, read_back.data());
  matvec_reference(p);  // panels
  p.weight = r.rows.data();
  p.weight_order = WeightOrder::kRows;
  p.y = expected.data();
  matvec_reference(p);
  p.weight = panels.data();
  p.weight_order = WeightOrder::kPanels;
  p.y = actual.data();
  decoder.run(p);
  expect_reordered_matches(expected, read_back, actual, in, n, r.y_stride);
}

// expect_panels_match_rows over the panel kernels' cases: odd shapes (partial panels, odd widths,
// one to three panels left after walk_rows's four runs), one row of x, 2..13 (the tiles of up to
// six rows, and the AVX2 kernel's of two panels up to four), 11..40 (two-panel first tiles of
// twelve, the tiles after the first sharing their rows), a NaN in row 1 (35 rows), wide inputs;
// then on `crowded`'s five threads up to 129 rows.
void expect_panels_match_rows_over_shapes(FastDecoder& decoder, FastDecoder& crowded,
                                          std::mt19937& rng, DType dtype) {
  for (int64_t in : {1, 2, 7, 64, 65, 513}) {
    for (int64_t out : {1, 5, 16, 17, 33, 200, 256, 1000}) {
      for (int64_t n : {1, 2, 3, 5, 6, 7, 13})
        expect_panels_match_rows(decoder, rng, dtype, in, out, n);
    }
    for (int64_t out : {17, 33, 200}) {
      for (int64_t n : {11, 12, 16, 17, 26, 32, 33, 40}) {
        expect_panels_match_rows(decoder, rng, dtype, in, out, n);
      }
    }
  }
  expect_panels_match_rows(decoder, rng, dtype, 2600, 40, 13);
  expect_panels_match_rows(decoder, rng, dtype, 1100, 20, 35);
  expect_panels_match_rows(decoder, rng, dtype, 1023, 65, 40);
  for (int64_t n : {1, 2, 7, 16, 40, 129})
    expect_panels_match_rows(crowded, rng, dtype, 300, 200, n);
}

// A panel kernel called directly refuses what it does not read, naming the field: weights of its
// own `dtype` in rows, and panels of `other`, a dtype it does not take (`dtype_rule`: what the
// message says it must be). The refusals come before any weight is read.
using PanelKernel = void (*)(const MatVecParams&, ThreadPool&, MatVecScratch&);
void expect_refuses_other_layouts(const std::string& name, PanelKernel kernel, DType dtype,
                                  DType other, const std::string& dtype_rule) {
  SCOPED_TRACE(name);
  std::vector<float> x(64), y(2);
  const std::vector<std::byte> rows = pack(x, 1, 64, dtype);
  std::vector<std::byte> panels(static_cast<size_t>(panel_bytes(other, kPanelRows, 64)));
  MatVecParams in_rows{rows.data(), nullptr, x.data(), y.data(), 2, 64, 1, 0, 0, dtype};
  MatVecParams other_panels{panels.data(), nullptr, x.data(), y.data(), 2, 64, 1, 0, 0, other};
  other_panels.weight_order = WeightOrder::kPanels;
  ThreadPool pool(1);
  MatVecScratch scratch;
  EXPECT_EQ(thrown_message([&] { kernel(in_rows, pool, scratch); }),
            name + ": weight_order: must be panels");
  EXPECT_EQ(thrown_message([&] { kernel(other_panels, pool, scratch); }),
            name + ": weight_dtype: must be " + dtype_rule);
}

// f32 and f16 panels move elements only: every element of odd shapes (a partial last panel, an
// odd input width: f16's inputs padded to even) reads back at float_panel_index, the padding is
// zero, and the order is not rows'.
TEST(MatVecTest, FloatPanelsReadBackExactly) {
  std::mt19937 rng(37);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (DType dtype : {DType::kF32, DType::kF16}) {
    const auto element_bytes = static_cast<size_t>(dtype_bytes(dtype));
    for (int64_t out : {1, 15, 16, 17, 40}) {
      for (int64_t in : {1, 2, 3, 31, 64, 65}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " out " + std::to_string(out) + " in " +
                     std::to_string(in));
        std::vector<float> w(static_cast<size_t>(out * in));
        for (float& v : w) v = normal(rng);
        const std::vector<std::byte> rows = pack(w, out, in, dtype);
        const int64_t bytes = float_panel_bytes(dtype, out, in);
        const int64_t inputs = dtype == DType::kF16 ? (in + 1) / 2 * 2 : in;
        ASSERT_EQ(bytes, (out + 15) / 16 * 16 * inputs * dtype_bytes(dtype));
        std::vector<std::byte> panels(static_cast<size_t>(bytes), std::byte{0xAB});
        pack_float_panels(dtype, rows.data(), out, in, panels.data());
        std::vector<bool> used(static_cast<size_t>(bytes) / element_bytes, false);
        for (int64_t o = 0; o < out; ++o) {
          for (int64_t i = 0; i < in; ++i) {
            const auto at = static_cast<size_t>(float_panel_index(dtype, in, o, i));
            ASSERT_FALSE(used[at]) << "two elements at " << at;
            used[at] = true;
            ASSERT_EQ(std::memcmp(panels.data() + at * element_bytes,
                                  rows.data() + static_cast<size_t>(o * in + i) * element_bytes,
                                  element_bytes),
                      0)
                << o << ", " << i;
          }
        }
        for (size_t at = 0; at < used.size(); ++at) {
          if (used[at]) continue;
          for (size_t k = 0; k < element_bytes; ++k) {
            ASSERT_EQ(panels[at * element_bytes + k], std::byte{0}) << "padding at " << at;
          }
        }
        // row 1's first element sits right after row 0's; row 0's second one a panel row on
        if (out >= 2 && in >= 2) {
          EXPECT_EQ(float_panel_index(dtype, in, 1, 0), 1);
          EXPECT_EQ(float_panel_index(dtype, in, 0, 1), 16);
        }
      }
    }
  }
  std::vector<std::byte> none(64);
  EXPECT_EQ(thrown_message([&] { pack_float_panels(DType::kF32, none.data(), 0, 4, none.data()); }),
            "pack_float_panels: out/in: must be > 0");
  EXPECT_EQ(
      thrown_message([&] { pack_float_panels(DType::kBf16, none.data(), 1, 4, none.data()); }),
      "pack_float_panels: dtype: must be f32 or f16, not bf16");
}

// f32 and f16 panels through the decoder (the AVX-512 or AVX2 panel kernel where
// fastest_weight_order says so, the reference elsewhere) against the reference on plain rows of the
// same weights, over expect_panels_match_rows_over_shapes' cases; x stays f32, so only the order
// of the sums differs. Kernels called directly refuse what they do not read.
TEST(MatVecTest, FloatPanelsMatchTheReference) {
  std::mt19937 rng(41);
  FastDecoder fast(2, detect_cpu_isa());
  FastDecoder crowded(5, detect_cpu_isa());
  const bool stores_panels = fastest_weight_order(DType::kF32) == WeightOrder::kPanels;
  EXPECT_EQ(stores_panels, fastest_weight_order(DType::kF16) == WeightOrder::kPanels);
  EXPECT_EQ(stores_panels, fast.isa() != CpuIsa::kScalar);
  std::cout << "[ INFO     ] f32 / f16 panels on this CPU: "
            << (!stores_panels                ? "the scalar reference (rows are stored)"
                : fast.isa() == CpuIsa::kAvx2 ? "AVX2 kernel"
                                              : "AVX-512 kernel")
            << "\n";
  for (DType dtype : {DType::kF32, DType::kF16}) {
    expect_panels_match_rows_over_shapes(fast, crowded, rng, dtype);
  }
  if (!cpu_supports(CpuIsa::kAvx512)) GTEST_SKIP() << "the kernel needs AVX-512";
  expect_refuses_other_layouts("matvec_float_panels", matvec_float_panels, DType::kF32,
                               DType::kBf16, "f32 or f16");
}

// f32, f16 and bf16 panels through a decoder that runs AVX2 (matvec_avx2_panels, where the CPU
// has AVX2) against the reference on plain rows, over expect_panels_match_rows_over_shapes' cases
// (odd widths: bf16's last pair and f16's last input alone); x stays f32. The kernel called
// directly refuses what it does not read.
TEST(MatVecTest, Avx2PanelsMatchTheReference) {
  if (!cpu_supports(CpuIsa::kAvx2)) GTEST_SKIP() << "no AVX2 + FMA + F16C on this CPU";
  std::mt19937 rng(47);
  FastDecoder fast(2, CpuIsa::kAvx2), crowded(5, CpuIsa::kAvx2);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBf16}) {
    ASSERT_EQ(fastest_weight_order(dtype, CpuIsa::kAvx2), WeightOrder::kPanels);
    expect_panels_match_rows_over_shapes(fast, crowded, rng, dtype);
  }
  expect_refuses_other_layouts("matvec_avx2_panels", matvec_avx2_panels, DType::kF32, DType::kQ8_0,
                               "f32, f16 or bf16");
}

// bf16 panels through the decoder (AVX-512 BF16's panel kernel where fastest_weight_order says
// so, from kAmxPanelMinRows rows AMX's tiles where the decoder runs AMX, the reference elsewhere)
// against the reference on plain rows of the same weights: odd shapes (partial panels, odd
// widths, one to three panels left after the four-panel runs), strides, batches of one (x in f32)
// and of 2..13 (x rounded to bf16: six rows a tile, then the rest; from 12 rows the first twelve
// two panels a tile, the runs' first two and last two; one block of x for the tiles),
// of 17..40 (the tiles' blocks of 16 rows in twos, then one, the last padded), bias, a NaN in one
// row of x. The reference reading panels equals it exactly.
TEST(MatVecTest, Bf16PanelsMatchTheReference) {
  std::mt19937 rng(31);
  FastDecoder fast(2, detect_cpu_isa());
  const bool stores_panels = fastest_weight_order(DType::kBf16) == WeightOrder::kPanels;
  std::cout << "[ INFO     ] bf16 panels on this CPU: "
            << (!stores_panels                ? "the scalar reference"
                : fast.isa() == CpuIsa::kAmx  ? "AVX-512 BF16 kernel at 1 row, AMX tiles from 2"
                : fast.isa() == CpuIsa::kAvx2 ? "AVX2 kernel, x in f32"
                                              : "AVX-512 BF16 kernel")
            << "\n";
  // five threads on this machine's cores: tasks that contend for the panels
  FastDecoder crowded(5, detect_cpu_isa());
  FastDecoder* decoder = &fast;
  const auto check = [&](int64_t in, int64_t out, int64_t n) {
    const RandomProblem r = random_problem(rng, in, out, n, DType::kBf16);
    SCOPED_TRACE(r.name() + (decoder == &crowded ? ", 5 threads" : ""));
    std::vector<std::byte> panels(static_cast<size_t>(bf16_panel_bytes(out, in)));
    pack_bf16_panels(reinterpret_cast<const uint16_t*>(r.rows.data()), out, in, panels.data());
    std::vector<float> expected = r.untouched_y(), actual = expected, read_back = expected;
    MatVecParams p = r.params(panels.data(), WeightOrder::kPanels, read_back.data());
    const bool rounds = fast.matvec_runs_bf16_products(p);
    EXPECT_EQ(rounds, stores_panels && bf16_product_min_rows(fast.isa()) > 0 && n >= 2);
    std::vector<float> rounded = r.x;  // what the products multiply
    if (rounds) {
      for (float& v : rounded) v = bf16_to_f32(f32_to_bf16(v));
    }
    p.x = rounded.data();
    matvec_reference(p);  // panels
    p.weight = r.rows.data();
    p.weight_order = WeightOrder::kRows;
    p.y = expected.data();
    matvec_reference(p);
    p.weight = panels.data();
    p.weight_order = WeightOrder::kPanels;
    p.x = r.x.data();
    p.y = actual.data();
    decoder->run(p);
    expect_reordered_matches(expected, read_back, actual, in, n, r.y_stride);
  };
  for (int64_t in : {1, 2, 7, 64, 65, 513}) {
    for (int64_t out : {1, 5, 16, 17, 33, 200, 256, 1000}) {
      for (int64_t n : {1, 2, 3, 5, 6, 7, 13}) check(in, out, n);
    }
    for (int64_t out : {17, 33, 200}) {
      for (int64_t n : {16, 17, 26, 32, 33, 40}) check(in, out, n);
    }
  }
  check(2600, 40, 13);  // x rounded on the pool (33,800 elements)
  check(11001, 20, 3);  // the same, with a NaN in row 1
  check(1100, 20, 35);  // a NaN in row 1 among three blocks of x
  check(2040, 33, 40);  // rows of 2048 rounded elements: the tiles' x a chunk more than 4 KiB apart
  check(1000, 33, 40);  // rows of 1024 (an even number of chunks): a chunk more than 2 KiB apart
  decoder = &crowded;
  for (int64_t n : {2, 7, 16, 40, 129}) check(300, 200, n);
  decoder = &fast;
  std::vector<float> x(64), y(1);
  // every kernel called directly refuses a layout it does not read, naming the field
  std::vector<std::byte> panels(static_cast<size_t>(bf16_panel_bytes(1, 64)));
  MatVecParams bf16_panels{panels.data(), nullptr, x.data(), y.data(), 2, 64, 1, 0, 0,
                           DType::kBf16};
  bf16_panels.weight_order = WeightOrder::kPanels;
  ThreadPool pool(1);
  MatVecScratch scratch;
  EXPECT_EQ(thrown_message([&] { matvec_gemm_bf16(bf16_panels, scratch); }),
            "matvec_gemm_bf16: weight_order: must be rows");
  if (cpu_supports(CpuIsa::kAvx2)) {
    EXPECT_EQ(thrown_message([&] { matvec_avx2(bf16_panels, pool, scratch); }),
              "matvec: weight_order: must be rows");
  }
  if (cpu_supports(CpuIsa::kAvx512) && cpu_has_avx512_bf16()) {
    EXPECT_EQ(thrown_message([&] { matvec_bf16_products(bf16_panels, pool, scratch); }),
              "matvec_bf16_products: weight_order: must be rows");
    MatVecParams rows = bf16_panels;
    rows.weight_order = WeightOrder::kRows;
    EXPECT_EQ(thrown_message([&] { matvec_bf16_panels(rows, pool, scratch); }),
              "matvec_bf16_panels: weight_order: must be panels");
  }
}

// The kernels' scratch starts on a cache line (each 64-byte load or AMX tile row of x one line),
// and the AMX kernel's rows of x lie an odd number of lines apart (so consecutive rows fall in
// distinct L1 sets), at least as wide as the rounded row.
TEST(MatVecTest, ScratchRowsLieOnCacheLines) {
  for (int64_t in = 1; in <= 9000; in += 37) {
    const int64_t stride = bf16_tile_row_stride(in);
    ASSERT_GE(stride, bf16_row_stride(in)) << in;
    ASSERT_EQ(stride * 2 % 64, 0) << in;
    ASSERT_EQ(stride * 2 / 64 % 2, 1) << in;
  }
  EXPECT_EQ(bf16_tile_row_stride(1024), 1056);
  EXPECT_EQ(bf16_tile_row_stride(4096), 4128);
  EXPECT_EQ(bf16_tile_row_stride(1000), 1056);
  EXPECT_EQ(bf16_tile_row_stride(1056), 1056);
  const auto on_a_line = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 64 == 0; };
  std::vector<float> x(3 * 1000);
  for (const DType dtype : {DType::kBf16, DType::kQ8_0, DType::kQ4_0}) {
    for (const WeightOrder order : {WeightOrder::kRows, WeightOrder::kPanels}) {
      MatVecScratch scratch;
      MatVecParams p{nullptr, nullptr, x.data(), nullptr, 3, 1000, 7, 0, 0, dtype};
      p.weight_order = order;
      reserve_matvec_scratch(p, scratch);
      for (const void* data : {static_cast<const void*>(scratch.bf16.data()),
                               static_cast<const void*>(scratch.quants.data()),
                               static_cast<const void*>(scratch.scales.data()),
                               static_cast<const void*>(scratch.block_bias.data())}) {
        if (data != nullptr) {
          EXPECT_TRUE(on_a_line(data)) << dtype_name(dtype);
        }
      }
    }
  }
}

// q8_0 and q4_0 panels move bytes only: every block of odd shapes (a partial last panel, a width
// whose last block is partial, odd and even block counts) reads back as ggml wrote it, each quant
// byte and scale sits where the layout says (computed here from its definition, B = 512 quant
// bytes a block for q8_0, 256 for q4_0: a panel is its blocks in pairs, each pair 2B bytes of
// quants then 64 of scales, an odd count's last block B bytes of quants, 32 of scales and 32 of
// padding; panel p from p times that; ggml's quant byte j of row r at 64 · (j / 4) + 4 · r + j % 4
// of its block's quants; row r's scale at 2 · r of its block's 32 bytes), the padding is zero, and
// the matrix is whole 64-byte lines, a panel's 32 bytes more than its rows in ggml's blocks where
// the count of blocks is odd.
TEST(MatVecTest, QuantPanelsReadBackExactly) {
  std::mt19937 rng(37);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (DType dtype : {DType::kQ8_0, DType::kQ4_0}) {
    const int64_t block_bytes = dtype == DType::kQ8_0 ? 34 : 18;
    const int64_t panel_block = dtype == DType::kQ8_0 ? 512 : 256;
    for (int64_t out : {1, 15, 16, 17, 40}) {
      for (int64_t in : {1, 31, 32, 33, 64, 96, 100}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " out " + std::to_string(out) + " in " +
                     std::to_string(in));
        const int64_t blocks = (in + 31) / 32, stride = row_bytes(dtype, in);
        const int64_t panels_count = (out + 15) / 16;
        ASSERT_EQ(stride, blocks * block_bytes);
        const int64_t pair_bytes = 2 * panel_block + 64;
        const int64_t panel_bytes = blocks / 2 * pair_bytes + blocks % 2 * (panel_block + 64);
        ASSERT_EQ(panel_bytes % 64, 0);
        ASSERT_EQ(panel_bytes, 16 * stride + blocks % 2 * 32);
        ASSERT_EQ(quant_panel_bytes(dtype, out, in), panels_count * panel_bytes);
        std::vector<float> w(static_cast<size_t>(in * out));
        for (float& v : w) v = normal(rng);
        const std::vector<std::byte> rows = pack(w, out, in, dtype);
        std::vector<std::byte> panels(static_cast<size_t>(quant_panel_bytes(dtype, out, in)),
                                      std::byte{0x5A});
        pack_quant_panels(dtype, rows.data(), out, in, panels.data());
        std::vector<bool> used(panels.size(), false);
        for (int64_t o = 0; o < out; ++o) {
          const size_t panel = static_cast<size_t>(o / 16 * panel_bytes), r = o % 16;
          for (int64_t k = 0; k < blocks; ++k) {
            const bool lone = k % 2 == 0 && k + 1 == blocks;
            const size_t quants =
                panel + static_cast<size_t>(k / 2 * pair_bytes + k % 2 * panel_block);
            const size_t scales =
                panel +
                static_cast<size_t>(k / 2 * pair_bytes + (lone ? 1 : 2) * panel_block + k % 2 * 32);
            const std::byte* ggml = rows.data() + o * stride + k * block_bytes;
            std::byte block[34];
            quant_panel_block(dtype, panels.data(), out, in, o, k, block);
            ASSERT_EQ(std::memcmp(block, ggml, static_cast<size_t>(block_bytes)), 0)
                << "row " << o << " block " << k;
            const size_t scale = scales + 2 * r;
            ASSERT_EQ(std::memcmp(&panels[scale], ggml, 2), 0);
            used[scale] = used[scale + 1] = true;
            for (int64_t j = 0; j < block_bytes - 2; ++j) {
              const size_t at = quants + static_cast<size_t>(64 * (j / 4) + 4 * r + j % 4);
              ASSERT_FALSE(used[at]) << "two quant bytes at " << at;
              used[at] = true;
              ASSERT_EQ(panels[at], ggml[2 + j]) << "row " << o << " block " << k << " byte " << j;
            }
          }
        }
        for (size_t at = 0; at < panels.size(); ++at) {
          if (!used[at]) {
            ASSERT_EQ(panels[at], std::byte{0}) << "padding at " << at;
          }
        }
      }
    }
  }
  std::byte block[34];
  std::vector<std::byte> panels(static_cast<size_t>(quant_panel_bytes(DType::kQ8_0, 1, 40)));
  EXPECT_EQ(
      thrown_message([&] { quant_panel_block(DType::kQ4_0, panels.data(), 1, 40, 0, 2, block); }),
      "quant_panel_block: k: must be in [0, blocks)");
  EXPECT_EQ(
      thrown_message([&] { quant_panel_block(DType::kQ8_0, panels.data(), 1, 40, 1, 0, block); }),
      "quant_panel_block: o: must be in [0, out)");
  EXPECT_EQ(
      thrown_message([&] { quant_panel_block(DType::kBf16, panels.data(), 1, 40, 0, 0, block); }),
      "quant_panel_block: dtype: must be q8_0 or q4_0, not bf16");
  EXPECT_EQ(
      thrown_message([&] { pack_quant_panels(DType::kQ4_0, panels.data(), 1, 0, panels.data()); }),
      "pack_quant_panels: out/in: must be > 0");
  EXPECT_EQ(
      thrown_message([&] { pack_quant_panels(DType::kF16, panels.data(), 1, 40, panels.data()); }),
      "pack_quant_panels: dtype: must be q8_0 or q4_0, not f16");
}

// q8_0 and q4_0 panels through each of their kernels where the CPU has it (AVX2's, AVX-512
// VNNI's, AMX int8's and AMX's over panels expanded to bf16, at every batch; called directly) and
// through the decoder (AVX2 without VNNI; VNNI below quant_tile_min_rows, AMX int8 from it,
// expanded from quant_expand_min_rows, where fastest_weight_order stores panels; the reference
// elsewhere). The int8 kernels against the reference on ggml's rows of the same weights; the
// expanded kernel against its twin: the reference over bf16 rows of the weights as load_rows
// reads them (q · d), each rounded by f32_to_bf16, times x rounded alike. Odd shapes (partial
// panels, partial last blocks, odd block counts: the tiles' lone last block; q4_0's runs of 16
// unpacked blocks, the last partial; the expanded panels' lone last panel), strides, batches of
// 1..9 (the VNNI kernel's tiles of four rows and two panels, two rows and four, the rest; AVX2's
// four panels at one row, two panels up to four rows, then one panel × up to five), of 16..40
// (the tiles' blocks of 16 rows, in twos for the bf16 tiles, the last padded), bias, a NaN in one
// row of x. The reference reading panels equals it exactly.
TEST(MatVecTest, QuantPanelsMatchTheReference) {
  std::mt19937 rng(41);
  FastDecoder fast(2, detect_cpu_isa());
  ThreadPool pool(2);
  ThreadPool crowded(5);  // five threads on this machine's cores, contending for x's rows
  MatVecScratch scratch;
  const bool avx2 = cpu_supports(CpuIsa::kAvx2);
  const bool vnni = cpu_has_avx512_vnni();
  const bool amx = cpu_supports(CpuIsa::kAmx) && cpu_has_amx_int8();  // (asks for the tiles)
  const bool expands = amx && cpu_has_avx512_bf16();
  std::cout << "[ INFO     ] q8_0 / q4_0 panels on this CPU: "
            << (expands ? "AVX2, AVX-512 VNNI, AMX int8 and AMX bf16 (expanded) kernels"
                : amx   ? "AVX2, AVX-512 VNNI and AMX int8 kernels"
                : vnni  ? "AVX2 and AVX-512 VNNI kernels"
                : avx2  ? "AVX2 kernel"
                        : "the scalar reference")
            << "; the decoder stores them "
            << (fastest_weight_order(DType::kQ4_0) == WeightOrder::kPanels ? "in panels"
                                                                           : "in another order")
            << "\n";
  const auto check = [&](DType dtype, int64_t in, int64_t out, int64_t n) {
    const RandomProblem r = random_problem(rng, in, out, n, dtype);
    SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + r.name());
    std::vector<std::byte> panels(static_cast<size_t>(quant_panel_bytes(dtype, out, in)));
    pack_quant_panels(dtype, r.rows.data(), out, in, panels.data());
    std::vector<float> expected = r.untouched_y(), read_back = expected;
    matvec_reference(r.params(r.rows.data(), WeightOrder::kRows, expected.data()));
    MatVecParams p = r.params(panels.data(), WeightOrder::kPanels, read_back.data());
    matvec_reference(p);
    // the expanded kernel's twin: bf16(q · d) rows times x rounded to bf16
    std::vector<float> dequantized(static_cast<size_t>(out * in)), x_rounded = r.x;
    load_rows(r.rows.data(), out, in, dtype, dequantized.data());
    std::vector<uint16_t> bf16_rows(dequantized.size());
    for (size_t i = 0; i < dequantized.size(); ++i) bf16_rows[i] = f32_to_bf16(dequantized[i]);
    for (float& v : x_rounded) v = bf16_to_f32(f32_to_bf16(v));
    std::vector<float> expanded = r.untouched_y();
    MatVecParams twin = r.params(bf16_rows.data(), WeightOrder::kRows, expanded.data());
    twin.weight_dtype = DType::kBf16;
    twin.x = x_rounded.data();
    matvec_reference(twin);
    const auto run = [&](bool expands_weights, auto&& kernel) {
      std::vector<float> actual = r.untouched_y();
      p.y = actual.data();
      kernel();
      expands_weights ? expect_reordered_matches(expanded, expanded, actual, in, n, r.y_stride)
                      : expect_reordered_matches(expected, read_back, actual, in, n, r.y_stride);
    };
    run(fast.matvec_expands_quant_panels(p), [&] { fast.run(p); });
    if (avx2) run(false, [&] { matvec_avx2_quant_panels(p, pool, scratch); });
    if (avx2 && n >= 16) run(false, [&] { matvec_avx2_quant_panels(p, crowded, scratch); });
    if (vnni) run(false, [&] { matvec_quant_panels(p, pool, scratch); });
    if (vnni && n >= 16) run(false, [&] { matvec_quant_panels(p, crowded, scratch); });
    if (amx) run(false, [&] { matvec_amx_quant_panels(p, pool, scratch); });
    if (expands) run(true, [&] { matvec_amx_expanded_panels(p, pool, scratch); });
  };
  for (DType dtype : {DType::kQ8_0, DType::kQ4_0}) {
    for (int64_t in : {1, 33, 64, 90, 513, 1100}) {
      for (int64_t out : {1, 5, 16, 17, 33, 301}) {
        for (int64_t n : {1, 2, 3, 4, 5, 6, 7, 9}) check(dtype, in, out, n);
      }
      for (int64_t out : {17, 200}) {
        for (int64_t n : {16, 17, 33, 40}) check(dtype, in, out, n);
      }
    }
    check(dtype, 1100, 20, 35);  // a NaN in row 1 among three blocks of x
    check(dtype, 90, 33, 50);    // four blocks of x, the last padded: q8_0's expanded path too
    check(dtype, 2600, 40, 13);  // 13 rows of 2,600 elements rounded (by the VNNI kernel's tasks)
    check(dtype, 11001, 20, 3);  // the same, with a NaN in row 1
  }
  // every kernel called directly refuses a layout it does not read, naming the field
  const auto refuses = [](const char* name, PanelKernel kernel) {
    expect_refuses_other_layouts(name, kernel, DType::kQ8_0, DType::kBf16, "q8_0 or q4_0");
  };
  if (avx2) refuses("matvec_avx2_quant_panels", matvec_avx2_quant_panels);
  if (vnni) refuses("matvec_quant_panels", matvec_quant_panels);
  if (amx) refuses("matvec_amx_quant_panels", matvec_amx_quant_panels);
  if (expands) refuses("matvec_amx_expanded_panels", matvec_amx_expanded_panels);
}

// The quants at their extremes, which no random weights reach: q8_0 weights of −128 (ggml's
// quantizer never writes it, a file may hold it) and 127 against x's ±127, a pair of products up
// to 2 · 128 · 127 = 32,512, where an int16 sum of pairs saturates if the kernel's bound is off;
// q4_0 nibbles of 15 (and 0) against x's ±127, a block's eight pairs of 15 · 127 summed in int16 up
// to 30,480. Every panel kernel this CPU has, and the decoder, against the reference on ggml's
// rows.
TEST(MatVecTest, QuantPanelsTakeTheExtremeQuants) {
  constexpr int64_t kIn = 96, kOut = 20, kN = 3;  // three blocks, a partial panel
  const auto block = [](std::vector<std::byte>& rows, uint16_t scale) {
    rows.push_back(static_cast<std::byte>(scale & 0xFF));
    rows.push_back(static_cast<std::byte>(scale >> 8));
  };
  for (DType dtype : {DType::kQ8_0, DType::kQ4_0}) {
    SCOPED_TRACE(dtype_name(dtype));
    const bool q8 = dtype == DType::kQ8_0;
    // weight (o, i): q8_0 127 where i % 4 < 2, else −128 (pairs of each: a kernel that offset
    // the weights to 0..255 against x's ±127 would pass int16); q4_0 nibble 15 (q = 7) there,
    // else 0 (q = −8); scale 1, or 0.5 in odd rows
    const auto quant = [&](int64_t i) { return i % 4 < 2 ? (q8 ? 127 : 15) : (q8 ? -128 : 0); };
    std::vector<std::byte> rows;
    for (int64_t o = 0; o < kOut; ++o) {
      for (int64_t k = 0; k < kIn / kQuantBlockElements; ++k) {
        block(rows, o % 2 == 1 ? 0x3800 : 0x3C00);
        const int64_t first = k * kQuantBlockElements;
        if (q8) {
          for (int64_t e = 0; e < kQuantBlockElements; ++e) {
            rows.push_back(static_cast<std::byte>(static_cast<int8_t>(quant(first + e))));
          }
        } else {
          for (int64_t e = 0; e < kQuantBlockElements / 2; ++e) {
            rows.push_back(static_cast<std::byte>(quant(first + e) | quant(first + e + 16) << 4));
          }
        }
      }
    }
    // x: row 0 the weights' signs (every product positive: q8_0's pairs at their largest), row 1
    // the opposite, row 2 all 1 (q4_0's nibbles against +127: its int16 sums at their largest)
    std::vector<float> x(static_cast<size_t>(kN * kIn));
    for (int64_t i = 0; i < kIn; ++i) {
      const float sign = quant(i) > (q8 ? 0 : 7) ? 1.0f : -1.0f;
      x[static_cast<size_t>(i)] = sign;
      x[static_cast<size_t>(kIn + i)] = -sign;
      x[static_cast<size_t>(2 * kIn + i)] = 1.0f;
    }
    std::vector<float> expected(static_cast<size_t>(kN * kOut));
    MatVecParams p{rows.data(), nullptr, x.data(), expected.data(), kN, kIn, kOut, 0, 0, dtype};
    matvec_reference(p);
    std::vector<std::byte> panels(static_cast<size_t>(quant_panel_bytes(dtype, kOut, kIn)));
    pack_quant_panels(dtype, rows.data(), kOut, kIn, panels.data());
    p.weight = panels.data();
    p.weight_order = WeightOrder::kPanels;
    ThreadPool pool(2);
    MatVecScratch scratch;
    FastDecoder fast(2, detect_cpu_isa());
    const auto check = [&](const char* kernel, auto&& run) {
      std::vector<float> actual(expected.size(), -777.0f);
      p.y = actual.data();
      run();
      for (size_t i = 0; i < actual.size(); ++i) {
        // exact integer sums scaled by powers of two: only the f32 adds of the blocks round
        ASSERT_NEAR(actual[i], expected[i], 1e-5 * std::abs(expected[i])) << kernel << " " << i;
      }
    };
    if (fastest_weight_order(dtype) == WeightOrder::kPanels) check("decoder", [&] { fast.run(p); });
    if (cpu_supports(CpuIsa::kAvx2)) {
      check("matvec_avx2_quant_panels", [&] { matvec_avx2_quant_panels(p, pool, scratch); });
    }
    if (cpu_supports(CpuIsa::kAvx512) && cpu_has_avx512_vnni()) {
      check("matvec_quant_panels", [&] { matvec_quant_panels(p, pool, scratch); });
    }
    if (cpu_supports(CpuIsa::kAmx) && cpu_has_amx_int8()) {
      check("matvec_amx_quant_panels", [&] { matvec_amx_quant_panels(p, pool, scratch); });
    }
  }
}

// Products that share x (q, k and v; up and gate) in one call of the decoder, x prepared once and
// every product's panels in one pool job: each product's y bit for bit what it is alone, through
// the decoder and the panel kernels called directly, over odd widths, partial panels, biases,
// strides, a NaN row, and tasks that run from one product's panels into the next; products that
// do not share x are refused, naming the product.
TEST(MatVecTest, ProductsThatShareXMatchEachAlone) {
  std::mt19937 rng(43);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  FastDecoder fast(2, detect_cpu_isa());
  ThreadPool pool(2);
  MatVecScratch scratch;
  const bool bf16_kernel = cpu_supports(CpuIsa::kAvx512) && cpu_has_avx512_bf16();
  const bool avx2 = cpu_supports(CpuIsa::kAvx2);
  const bool vnni = cpu_supports(CpuIsa::kAvx512) && cpu_has_avx512_vnni();
  const bool amx = cpu_supports(CpuIsa::kAmx);  // (asks for the tiles)
  const bool amx_int8 = amx && cpu_has_amx_int8();
  struct Product {
    std::vector<std::byte> weight;
    std::vector<float> bias;
    int64_t out, y_stride;
  };
  const auto check = [&](DType dtype, int64_t in, int64_t n, std::vector<int64_t> outs) {
    SCOPED_TRACE(std::string(dtype_name(dtype)) + " in " + std::to_string(in) + " n " +
                 std::to_string(n) + " products " + std::to_string(outs.size()));
    const WeightOrder order = fastest_weight_order(dtype);
    const int64_t x_stride = in + 5;
    std::vector<float> x(static_cast<size_t>(n * x_stride));
    for (float& v : x) v = normal(rng);
    if (n >= 3) x[static_cast<size_t>(x_stride + in / 3)] = NAN;  // row 1
    std::vector<Product> products;
    for (int64_t out : outs) {
      std::vector<float> w(static_cast<size_t>(out * in));
      for (float& v : w) v = normal(rng);
      Product& p = products.emplace_back();
      p.weight = pack(w, out, in, dtype);
      if (order == WeightOrder::kPanels) {
        std::vector<std::byte> panels(static_cast<size_t>(panel_bytes(dtype, out, in)));
        pack_panels(dtype, p.weight.data(), out, in, panels.data());
        p.weight = panels;
      }
      p.bias.resize(static_cast<size_t>(out));
      for (float& v : p.bias) v = normal(rng);
      p.out = out;
      p.y_stride = out + 1 + static_cast<int64_t>(products.size());
    }
    const auto params = [&](std::vector<std::vector<float>>& ys) {
      std::vector<MatVecParams> list;
      ys.clear();
      for (const Product& p : products) {
        ys.emplace_back(static_cast<size_t>(n * p.y_stride), -777.0f);
        MatVecParams m{p.weight.data(), p.bias.data(), x.data(), ys.back().data(), n, in, p.out,
                       x_stride,        p.y_stride,    dtype};
        m.weight_order = order;
        list.push_back(m);
      }
      return list;
    };
    std::vector<std::vector<float>> alone, together;
    for (const MatVecParams& m : params(alone)) fast.run(m);
    const auto expect_same = [&](const char* how) {
      for (size_t i = 0; i < products.size(); ++i) {
        ASSERT_EQ(std::memcmp(alone[i].data(), together[i].data(), alone[i].size() * 4), 0)
            << how << ": product " << i;
      }
    };
    std::vector<MatVecParams> list = params(together);
    fast.run(list.data(), static_cast<int64_t>(list.size()));
    expect_same("the decoder");
    // A kernel called directly is held to itself alone: where the decoder runs AMX tiles for
    // these rows, the AVX-512 kernels sum in another order and differ from it in the last bits.
    // kernel(params, count) calls the kernel's span form, which its one-product form calls.
    const auto held_to_itself = [&](const char* name, auto&& kernel) {
      for (const MatVecParams& m : params(alone)) kernel(&m, 1);
      list = params(together);
      kernel(list.data(), static_cast<int64_t>(list.size()));
      expect_same(name);
    };
    const bool panels = order == WeightOrder::kPanels, bf16 = dtype == DType::kBf16;
    const bool quant = takes_quant_panels(dtype);
    if (panels && bf16 && bf16_kernel) {
      held_to_itself("matvec_bf16_panels", [&](const MatVecParams* m, int64_t count) {
        matvec_bf16_panels(m, count, pool, scratch);
      });
    }
    if (panels && takes_float_panels(dtype)) {
      held_to_itself("matvec_float_panels", [&](const MatVecParams* m, int64_t count) {
        matvec_float_panels(m, count, pool, scratch);
      });
    }
    if (panels && (quant || takes_float_panels(dtype) || bf16) && avx2) {
      held_to_itself("the AVX2 panel kernel", [&](const MatVecParams* m, int64_t count) {
        quant ? matvec_avx2_quant_panels(m, count, pool, scratch)
              : matvec_avx2_panels(m, count, pool, scratch);
      });
    }
    if (panels && quant && vnni) {
      held_to_itself("matvec_quant_panels", [&](const MatVecParams* m, int64_t count) {
        matvec_quant_panels(m, count, pool, scratch);
      });
    }
    if (panels && bf16 && amx) {
      held_to_itself("matvec_amx_bf16_panels", [&](const MatVecParams* m, int64_t count) {
        matvec_amx_bf16_panels(m, count, pool, scratch);
      });
    }
    if (panels && quant && amx && cpu_has_avx512_bf16()) {
      held_to_itself("matvec_amx_expanded_panels", [&](const MatVecParams* m, int64_t count) {
        matvec_amx_expanded_panels(m, count, pool, scratch);
      });
    }
    if (panels && quant && amx_int8) {
      held_to_itself("matvec_amx_quant_panels", [&](const MatVecParams* m, int64_t count) {
        matvec_amx_quant_panels(m, count, pool, scratch);
      });
    }
    if (n >= 3) {
      ASSERT_TRUE(std::isnan(together[0][static_cast<size_t>(products[0].y_stride)]));
    }
  };
  for (DType dtype : {DType::kBf16, DType::kQ8_0, DType::kQ4_0, DType::kF32, DType::kF16}) {
    for (int64_t in : {33, 513, 1100}) {
      for (int64_t n : {1, 2, 3, 5, 7, 13, 17}) {
        check(dtype, in, n, {64, 17, 5});      // q, k, v: a partial panel, a panel of five rows
        check(dtype, in, n, {200, 200});       // up and gate
        check(dtype, in, n, {16, 1, 33, 48});  // kMaxSharedProducts
      }
    }
  }
  // products that do not share x, and counts outside 1..kMaxSharedProducts
  std::vector<float> x(64, 1.0f), y(8);
  const std::vector<std::byte> rows = pack(x, 1, 64, DType::kF32);
  MatVecParams a{rows.data(), nullptr, x.data(), y.data(), 1, 64, 1, 0, 0, DType::kF32};
  MatVecParams list[kMaxSharedProducts + 1] = {a, a, a, a, a};
  list[1].n = 2;
  EXPECT_EQ(thrown_message([&] { fast.run(list, 2); }),
            "decoder: product 1: n: must be the first product's (products that share x)");
  list[1] = a;
  list[2].x_stride = 65;
  EXPECT_EQ(thrown_message([&] { fast.run(list, 3); }),
            "decoder: product 2: x_stride: must be the first product's (products that share x)");
  list[2] = a;
  list[1].weight_dtype = DType::kBf16;
  EXPECT_EQ(thrown_message([&] { fast.run(list, 2); }),
            "decoder: product 1: weight_dtype: must be the first product's (products that share "
            "x)");
  EXPECT_EQ(thrown_message([&] { fast.run(list, 0); }), "decoder: count: must be 1..4, not 0");
  list[1] = a;
  EXPECT_EQ(thrown_message([&] { fast.run(list, kMaxSharedProducts + 1); }),
            "decoder: count: must be 1..4, not 5");
  if (vnni) {
    EXPECT_EQ(thrown_message([&] { matvec_quant_panels(list, 0, pool, scratch); }),
              "matvec_quant_panels: count: must be 1..4, not 0");
  }
  if (amx_int8) {
    EXPECT_EQ(thrown_message([&] { matvec_amx_quant_panels(list, 5, pool, scratch); }),
              "matvec_amx_quant_panels: count: must be 1..4, not 5");
  }
  if (amx) {
    list[1].n = 3;
    EXPECT_EQ(thrown_message([&] { matvec_amx_bf16_panels(list, 2, pool, scratch); }),
              "matvec_amx_bf16_panels: product 1: n: must be the first product's (products that "
              "share x)");
  }
}

}  // namespace
}  // namespace kvlab
