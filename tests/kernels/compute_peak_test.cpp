#include "kernels/compute_peak.h"

#include <gtest/gtest.h>

#include <cmath>
#include <iostream>

#include "kernels/fast_decoder.h"

namespace kvlab {
namespace {

// The bf16 peak is measured with the instruction the dense layers' bf16 products run: AMX's
// tile multiply where the decoder runs AMX, vdpbf16ps where it has AVX-512 BF16 only, none
// elsewhere; each loop counts the multiply-adds it did (a tile multiply 16 × 16 × 32) and leaves
// a finite sum of its products in the sink.
TEST(ComputePeakTest, Bf16PeakUsesTheInstructionOfTheDenseProducts) {
  ThreadPool pool(1);
  const std::optional<ComputePeak> peak = measure_compute_peak(MacKind::kBf16, pool, 1);
  if (detect_cpu_isa() == CpuIsa::kAmx) {
    ASSERT_TRUE(peak.has_value());
    EXPECT_EQ(peak->isa, "amx tdpbf16ps");
    float sink = 0;
    EXPECT_EQ(mac_loop_bf16_amx(160, &sink), 10 * 4 * 16 * 16 * 32);
    // every product 2^-7 · 2^-7, 32 a sum, 10 rounds into sums[0] and sums[255]
    EXPECT_FLOAT_EQ(sink, 2.0f * 10 * 32 * std::ldexp(1.0f, -14));
  } else if (cpu_supports(CpuIsa::kAvx512) && cpu_has_avx512_bf16()) {
    ASSERT_TRUE(peak.has_value());
    EXPECT_EQ(peak->isa, "avx512 vdpbf16ps");
  } else {
    EXPECT_FALSE(peak.has_value());
  }
  if (peak.has_value()) {
    std::cout << "[ INFO     ] bf16 peak: " << peak->isa << ", " << peak->median()
              << " G multiply-adds/s on one thread\n";
    EXPECT_GT(peak->median(), 0.0);
  }
}

// The loaded-tiles rate runs the bf16 peak's multiplies with their four operand tiles loaded
// from L1 every round: where the decoder runs AMX only, counting the same multiply-adds and
// summing the same products as the peak's loop (every operand 2^-7).
TEST(ComputePeakTest, Bf16LoadedTilesRunTheSameMultipliesWithLoads) {
  ThreadPool pool(1);
  const std::optional<ComputePeak> loaded = measure_compute_peak(MacKind::kBf16Loaded, pool, 1);
  if (detect_cpu_isa() != CpuIsa::kAmx) {
    EXPECT_FALSE(loaded.has_value());
    return;
  }
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(mac_kind_name(loaded->kind), "bf16 tiles loaded");
  EXPECT_EQ(loaded->isa, "amx tdpbf16ps, 4 operand tiles loaded every 4");
  float sink = 0;
  EXPECT_EQ(mac_loop_bf16_amx_loaded(160, &sink), 10 * 4 * 16 * 16 * 32);
  EXPECT_FLOAT_EQ(sink, 2.0f * 10 * 32 * std::ldexp(1.0f, -14));
  std::cout << "[ INFO     ] bf16 tiles loaded: " << loaded->median()
            << " G multiply-adds/s on one thread\n";
  EXPECT_GT(loaded->median(), 0.0);
}

// The int8 peak is the instruction the q8_0 / q4_0 panel kernels are built of: vpdpbusd where the
// decoder has AVX-512 VNNI, else AVX2's vpmaddubsw (as KVLAB_CPU_ISA=avx2 caps it, too), none
// without AVX2. The AVX2 loop counts 32 multiply-adds a vpmaddubsw and, every operand 1, sums
// exactly that many products, the rounds past the last whole eight included.
TEST(ComputePeakTest, Int8PeakIsVnniOrElseAvx2) {
  ThreadPool pool(1);
  const std::optional<ComputePeak> peak = measure_compute_peak(MacKind::kInt8, pool, 1);
  const std::optional<ComputePeak> capped = measure_compute_peak(MacKind::kInt8, pool, 1, true);
  if (!cpu_supports(CpuIsa::kAvx2)) {
    EXPECT_FALSE(peak.has_value());
    EXPECT_FALSE(capped.has_value());
    return;
  }
  ASSERT_TRUE(peak.has_value());
  ASSERT_TRUE(capped.has_value());
  EXPECT_EQ(peak->isa, cpu_supports(CpuIsa::kAvx512) && cpu_has_avx512_vnni()
                           ? "avx512 vpdpbusd"
                           : "avx2 vpmaddubsw, int16 sums");
  EXPECT_EQ(capped->isa, "avx2 vpmaddubsw, int16 sums");
  for (int64_t rounds : {8, 21}) {
    float sink = 0;
    EXPECT_EQ(mac_loop_int8_avx2(rounds, &sink), rounds * 10 * 32);
    EXPECT_EQ(sink, static_cast<float>(rounds * 10 * 32)) << rounds << " rounds";
  }
  std::cout << "[ INFO     ] int8 peak: " << peak->isa << ", " << peak->median()
            << " G multiply-adds/s on one thread; AVX2's " << capped->median() << "\n";
  EXPECT_GT(capped->median(), 0.0);
}

// The int8-blocks peak is AMX's int8 tile multiply at 32 inputs (one q8_0 block) where the q8_0
// weights run it, and absent elsewhere; its loop counts 16 × 16 × 32 multiply-adds a multiply and
// sums its products (every operand 1: 32 a sum, 10 rounds, into sums[0] and sums[255]).
TEST(ComputePeakTest, Int8BlocksPeakIsTheTileMultiplyOfTheQ8_0Weights) {
  ThreadPool pool(1);
  const std::optional<ComputePeak> peak = measure_compute_peak(MacKind::kInt8Blocks, pool, 1);
  if (quant_tile_min_rows(DType::kQ8_0) == 0) {
    EXPECT_FALSE(peak.has_value());
    return;
  }
  ASSERT_TRUE(peak.has_value());
  EXPECT_EQ(peak->isa, "amx tdpbssd, 32 inputs a multiply");
  EXPECT_EQ(mac_kind_name(peak->kind), "int8 blocks");
  float sink = 0;
  EXPECT_EQ(mac_loop_int8_amx(160, &sink), 10 * 4 * 16 * 16 * 32);
  EXPECT_EQ(sink, 2.0f * 10 * 32);
  std::cout << "[ INFO     ] int8 blocks peak: " << peak->median()
            << " G multiply-adds/s on one thread\n";
  EXPECT_GT(peak->median(), 0.0);
}

}  // namespace
}  // namespace kvlab
