// The cache's scaled dtypes (q8_0, q4_0, fp8): byte layouts checked against values worked by
// hand, round-trip errors against the bounds each format promises, NaN handling, and e4m3
// against its definition code by code; and the dense kernels' own rounding of x to q8_0 and bf16
// against store_rows and f32_to_bf16, bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <vector>

#include "kernels/bf16_rows.h"
#include "kernels/convert.h"
#include "kernels/fast_decoder.h"
#include "kernels/q8_0_rows.h"

namespace kvlab {
namespace {

std::vector<std::byte> store(const std::vector<float>& values, int64_t width, DType dtype) {
  const int64_t rows = static_cast<int64_t>(values.size()) / width;
  std::vector<std::byte> bytes(static_cast<size_t>(rows * row_bytes(dtype, width)));
  store_rows(values.data(), rows, width, dtype, bytes.data());
  return bytes;
}

std::vector<float> load(const std::vector<std::byte>& bytes, int64_t rows, int64_t width,
                        DType dtype) {
  std::vector<float> out(static_cast<size_t>(rows * width));
  load_rows(bytes.data(), rows, width, dtype, out.data());
  return out;
}

float f16_at(const std::vector<std::byte>& bytes, size_t offset) {
  uint16_t bits;
  std::memcpy(&bits, bytes.data() + offset, 2);
  return f16_to_f32(bits);
}

TEST(QuantizedRowsTest, Q8_0BlockIsAnF16ScaleThen32Int8) {
  // amax 2.54: d = 0.02, q = round(x / d)
  std::vector<float> row(32, 0.0f);
  row[0] = 2.54f;
  row[1] = -1.0f;    // -50
  row[2] = 0.011f;   // 0.55 → 1
  row[31] = 0.009f;  // 0.45 → 0
  const std::vector<std::byte> bytes = store(row, 32, DType::kQ8_0);
  ASSERT_EQ(bytes.size(), 34u);
  EXPECT_EQ(f16_at(bytes, 0), f16_to_f32(f32_to_f16(2.54f / 127.0f)));
  EXPECT_EQ(static_cast<int8_t>(bytes[2]), 127);
  EXPECT_EQ(static_cast<int8_t>(bytes[3]), -50);
  EXPECT_EQ(static_cast<int8_t>(bytes[4]), 1);
  EXPECT_EQ(static_cast<int8_t>(bytes[33]), 0);
  const float d = f16_at(bytes, 0);
  const std::vector<float> back = load(bytes, 1, 32, DType::kQ8_0);
  EXPECT_EQ(back[0], 127 * d);
  EXPECT_EQ(back[1], -50 * d);
  EXPECT_EQ(back[31], 0.0f);
}

TEST(QuantizedRowsTest, Q8_0RoundsHalvesAwayFromZeroLikeLround) {
  // amax 127: d = 1 and x / d = x exactly, so halves and their neighbours reach the rounding;
  // then random blocks against std::lround of x · (1 / d), the definition ggml uses
  std::vector<float> row(32, 0.0f);
  row[0] = 127.0f;
  const float halves[] = {0.5f,
                          -0.5f,
                          1.5f,
                          -1.5f,
                          2.5f,
                          -2.5f,
                          126.5f,
                          -126.5f,
                          std::nextafter(0.5f, 0.0f),
                          std::nextafter(-0.5f, 0.0f),
                          std::nextafter(2.5f, 3.0f),
                          -0.0f};
  for (size_t i = 0; i < std::size(halves); ++i) row[1 + i] = halves[i];
  std::vector<std::byte> bytes = store(row, 32, DType::kQ8_0);
  ASSERT_EQ(f16_at(bytes, 0), 1.0f);
  for (size_t i = 0; i < std::size(halves); ++i) {
    EXPECT_EQ(static_cast<int8_t>(bytes[3 + i]), std::lround(halves[i])) << halves[i];
  }
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int trial = 0; trial < 2000; ++trial) {
    for (float& x : row) x = normal(rng) * (trial % 7 == 0 ? 1e-3f : 3.0f);
    bytes = store(row, 32, DType::kQ8_0);
    float amax = 0.0f;
    for (float x : row) amax = std::max(amax, std::fabs(x));
    const float inverse = 1.0f / (amax / 127.0f);
    for (int i = 0; i < 32; ++i) {
      ASSERT_EQ(static_cast<int8_t>(bytes[2 + i]), std::lround(row[i] * inverse))
          << "trial " << trial << " element " << i;
    }
  }
}

TEST(QuantizedRowsTest, Q4_0BlockPacksElementsIAndIPlus16InOneByte) {
  // the largest magnitude is -4 (x = -4 → d = 0.5, q = 0); x = (q − 8)·d
  std::vector<float> row(32, 0.0f);  // 0 → q = 8
  row[0] = -4.0f;
  row[16] = 3.5f;  // 7 + 8 = 15
  row[1] = 1.24f;  // 2.48 + 8.5 → 10
  row[17] = 4.0f;  // 8 + 8.5 → 16, clamped to 15 (3.5)
  const std::vector<std::byte> bytes = store(row, 32, DType::kQ4_0);
  ASSERT_EQ(bytes.size(), 18u);
  EXPECT_EQ(f16_at(bytes, 0), 0.5f);
  EXPECT_EQ(static_cast<uint8_t>(bytes[2]), 0x00 | (15 << 4));  // elements 0 and 16
  EXPECT_EQ(static_cast<uint8_t>(bytes[3]), 10 | (15 << 4));    // elements 1 and 17
  EXPECT_EQ(static_cast<uint8_t>(bytes[4]), 8 | (8 << 4));      // zeros
  const std::vector<float> back = load(bytes, 1, 32, DType::kQ4_0);
  EXPECT_EQ(back[0], -4.0f);
  EXPECT_EQ(back[16], 3.5f);
  EXPECT_EQ(back[1], 1.0f);
  EXPECT_EQ(back[17], 3.5f);
  EXPECT_EQ(back[5], 0.0f);
}

TEST(QuantizedRowsTest, E4m3MatchesItsDefinitionCodeByCode) {
  // value = (−1)^s · 2^(e−7) · (1 + m/8), e = 0: 2^−6 · m/8; e = 15, m = 7: NaN
  for (int code = 0; code < 256; ++code) {
    SCOPED_TRACE(code);
    const int e = (code >> 3) & 15, m = code & 7;
    const double sign = (code & 0x80) ? -1.0 : 1.0;
    const float value = e4m3_to_f32(static_cast<uint8_t>(code));
    if (e == 15 && m == 7) {
      EXPECT_TRUE(std::isnan(value));
      EXPECT_EQ(f32_to_e4m3(value) & 0x7F, 0x7F);
      continue;
    }
    const double expected =
        e == 0 ? sign * std::pow(2.0, -6) * m / 8.0 : sign * std::pow(2.0, e - 7) * (1.0 + m / 8.0);
    EXPECT_EQ(value, static_cast<float>(expected));
    EXPECT_EQ(f32_to_e4m3(value), static_cast<uint8_t>(code));  // every value encodes back
  }
  EXPECT_EQ(e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(f32_to_e4m3(1e6f), 0x7E);  // saturates
  EXPECT_EQ(f32_to_e4m3(-1e6f), 0xFE);
  // halfway between 1 and 1.125 rounds to even (1); between 1.125 and 1.25 to 1.25
  EXPECT_EQ(e4m3_to_f32(f32_to_e4m3(1.0625f)), 1.0f);
  EXPECT_EQ(e4m3_to_f32(f32_to_e4m3(1.1875f)), 1.25f);
}

TEST(QuantizedRowsTest, RoundTripsStayWithinEachFormatsBound) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t width : {1, 16, 32, 33, 90, 128}) {
    const int64_t rows = 37;
    std::vector<float> values(static_cast<size_t>(rows * width));
    for (size_t i = 0; i < values.size(); ++i) {
      values[i] = normal(rng) * (i % 7 == 0 ? 20.0f : 1.0f);  // outliers, as real caches have
    }
    for (DType dtype : {DType::kQ8_0, DType::kQ4_0, DType::kFp8}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " width " + std::to_string(width));
      const std::vector<std::byte> bytes = store(values, width, dtype);
      ASSERT_EQ(static_cast<int64_t>(bytes.size()), rows * row_bytes(dtype, width));
      const std::vector<float> back = load(bytes, rows, width, dtype);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t b0 = 0; b0 < width; b0 += 32) {
          // the bound of the scale's group: a block (q8_0, q4_0) or the row (fp8)
          const int64_t g0 = dtype == DType::kFp8 ? 0 : b0;
          const int64_t g1 = dtype == DType::kFp8 ? width : std::min(width, b0 + 32);
          float amax = 0;
          for (int64_t i = g0; i < g1; ++i) amax = std::max(amax, std::fabs(values[r * width + i]));
          for (int64_t i = b0; i < std::min(width, b0 + 32); ++i) {
            const float x = values[static_cast<size_t>(r * width + i)];
            const float y = back[static_cast<size_t>(r * width + i)];
            ASSERT_FALSE(std::isnan(y));
            // q8_0: half a step of amax/127, plus the f16 rounding of the scale (2^-11 of it);
            // q4_0: a whole step of amax/8 (the clamp at q = 15), plus the same; fp8: 2^-4 of
            // |x| (3 mantissa bits) or half the subnormal step of amax/448
            double bound = 0;
            if (dtype == DType::kQ8_0) bound = amax / 254.0 + amax * std::pow(2.0, -11);
            if (dtype == DType::kQ4_0) bound = amax / 8.0 + amax * std::pow(2.0, -11);
            if (dtype == DType::kFp8) {
              bound = std::max(std::fabs(x) * std::pow(2.0, -4), amax / 448.0 * std::pow(2.0, -10));
            }
            EXPECT_LE(std::fabs(x - y), bound * 1.0001 + 1e-12) << "row " << r << " element " << i;
          }
        }
      }
    }
  }
}

TEST(QuantizedRowsTest, ANanSpoilsItsBlockOnlyAndZerosStayZero) {
  const float x = 127.0f / 256.0f;  // exact in both formats: d = 1/256 (q8_0), −127/2048 (q4_0)
  std::vector<float> row(64, x);
  row[40] = NAN;
  for (DType dtype : {DType::kQ8_0, DType::kQ4_0}) {
    const std::vector<float> back = load(store(row, 64, dtype), 1, 64, dtype);
    for (int64_t i = 0; i < 32; ++i) EXPECT_EQ(back[i], x) << dtype_name(dtype);
    for (int64_t i = 32; i < 64; ++i) EXPECT_TRUE(std::isnan(back[i])) << dtype_name(dtype);
  }
  const std::vector<float> fp8 = load(store(row, 64, DType::kFp8), 1, 64, DType::kFp8);
  for (float y : fp8) EXPECT_TRUE(std::isnan(y));  // one scale per row
  const std::vector<float> zeros(48, 0.0f);
  for (DType dtype : {DType::kQ8_0, DType::kQ4_0, DType::kFp8}) {
    for (float y : load(store(zeros, 48, dtype), 1, 48, dtype)) EXPECT_EQ(y, 0.0f);
  }
}

TEST(QuantizedRowsTest, Avx512RowQuantizerMatchesStoreRowsBitForBit) {
  // The kernels' x (quantize_q8_0_row_avx512, sixteen blocks a register) against store_rows, the
  // reference, on widths with partial blocks and partial groups of sixteen, into both layouts the
  // kernels use; blocks of halves (amax 127), a NaN, zeros, a denormal amax (1 / d overflows),
  // an infinity, and random values of several magnitudes
  if (!cpu_supports(CpuIsa::kAvx512)) GTEST_SKIP() << "this CPU has no AVX-512";
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t width : {1, 31, 32, 33, 95, 511, 512, 513, 544, 1000, 4096}) {
    std::vector<float> row(static_cast<size_t>(width));
    for (int64_t i = 0; i < width; ++i) {
      const float magnitude = (i / 32) % 3 == 0 ? 3.0f : (i / 32) % 3 == 1 ? 1e-3f : 1e4f;
      row[i] = normal(rng) * magnitude;
    }
    const int64_t blocks = (width + 31) / 32;
    const auto block = [&](int64_t k, auto fill) {
      if (k < blocks) {
        for (int64_t i = k * 32; i < std::min(width, (k + 1) * 32); ++i) row[i] = fill(i - k * 32);
      }
    };
    block(1, [](int64_t i) {
      return i == 0 ? 127.0f : (i % 2 ? 0.5f : -1.5f) + static_cast<float>(i % 5);
    });
    block(2, [](int64_t i) { return i == 3 ? NAN : 1.0f; });
    block(3, [](int64_t) { return 0.0f; });
    block(4, [](int64_t i) { return i % 2 ? 1e-40f : -3e-41f; });
    block(5, [](int64_t i) { return i == 7 ? INFINITY : 2.0f; });
    const std::vector<std::byte> expected = store(row, width, DType::kQ8_0);
    for (const auto& [quant_stride, scale_stride] :
         {std::pair<int64_t, int64_t>{32, 1}, {512, 16}}) {
      std::vector<int8_t> quants(static_cast<size_t>(blocks * quant_stride), 99);
      std::vector<float> scales(static_cast<size_t>(blocks * scale_stride), -1.0f);
      quantize_q8_0_row_avx512(row.data(), width, quants.data(), quant_stride, scales.data(),
                               scale_stride);
      for (int64_t k = 0; k < blocks; ++k) {
        const float d = f16_at(expected, static_cast<size_t>(k * 34));
        const float got = scales[k * scale_stride];
        EXPECT_TRUE(std::isnan(d) ? std::isnan(got) : got == d)
            << "width " << width << " block " << k << ": scale " << got << ", store_rows " << d;
        for (int64_t e = 0; e < 32; ++e) {
          ASSERT_EQ(quants[k * quant_stride + e], static_cast<int8_t>(expected[k * 34 + 2 + e]))
              << "width " << width << " block " << k << " element " << e;
        }
      }
    }
  }
}

TEST(QuantizedRowsTest, Avx512Bf16RowRoundingMatchesF32ToBf16BitForBit) {
  // round_bf16_row_avx512 (vcvtne2ps2bf16, its integer twin where a denormal is among 32) against
  // f32_to_bf16: ties both ways, NaNs quiet and signalling, infinities, denormals (which the
  // instruction alone flushes), zeros past `in`, and a row length that is not whole registers
  if (!cpu_has_avx512_bf16()) GTEST_SKIP() << "this CPU has no AVX-512 BF16";
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const auto from_bits = [](uint32_t bits) {
    float v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
  };
  for (const auto& [in, elements] : {std::pair<int64_t, int64_t>{1, 16},
                                     {31, 32},
                                     {32, 32},
                                     {33, 48},
                                     {100, 128},
                                     {1000, 1024},
                                     {4096, 4096}}) {
    std::vector<float> row(static_cast<size_t>(in));
    for (float& v : row) v = normal(rng) * 10.0f;
    const float special[] = {from_bits(0x3F808000),  // halfway, even below: rounds down
                             from_bits(0x3F818000),  // halfway, odd below: rounds up
                             from_bits(0x7FC00001),
                             from_bits(0x7F800001),
                             from_bits(0xFF800123),
                             INFINITY,
                             -INFINITY,
                             0.0f,
                             -0.0f,
                             from_bits(0x00000001),
                             from_bits(0x807FFFFF),
                             from_bits(0x00008000),
                             from_bits(0x00018000),
                             std::numeric_limits<float>::max()};
    // every special in the row's last 32 (the twin's path), and the ones that are no denormal in
    // its first 32 too where the row has more (the instruction's path)
    const int64_t last = (in - 1) / 32 * 32;
    for (size_t s = 0; s < std::size(special); ++s) {
      const int64_t offset = static_cast<int64_t>(s);
      row[static_cast<size_t>(std::min(in - 1, last + offset))] = special[s];
      if (last > 0 && std::fpclassify(special[s]) != FP_SUBNORMAL) row[s] = special[s];
    }
    std::vector<uint16_t> got(static_cast<size_t>(elements), 0xABCD);
    round_bf16_row_avx512(row.data(), in, got.data(), elements);
    for (int64_t i = 0; i < elements; ++i) {
      const uint16_t expected = i < in ? f32_to_bf16(row[i]) : uint16_t{0};
      ASSERT_EQ(got[i], expected) << "in " << in << " element " << i;
    }
  }
}

}  // namespace
}  // namespace kvlab
