// The VNNI q8_0 dense kernel's tile (tile_blocks of kernels/quant_panel_tile.inc, the kernel's own
// loop, at six rows of x and two panels: per q8_0 block of 32 inputs, each panel's eight 64-byte
// loads flipped to q + 128 by one xor, 96 vpdpbusd into 12 exact int32 sums, then each sum
// converted and scaled by d_w · d_x into its f32 sum) on one thread, every operand in L1.
// G multiply-adds/s for the loop as the kernel runs it and with one part of a block's work left out
// at a time (tile_blocks's Parts), beside the vpdpbusd register loop of `kvlab bench compute` on
// the same thread: how far below that peak the format's per-block scaling leaves the kernel before
// any memory traffic. The variants without a part give wrong sums; they time the rest. Not part of
// the build; after `make build`:
//   g++ -O2 -std=c++20 -Isrc -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mf16c -mfma
//       bench/vnni_q8_0_block_loop.cpp build/src/libkvlab_kernels.a build/src/libkvlab_spec.a
//       build/src/libkvlab_report.a -ldnnl -lfmt -lpthread -o /tmp/vqbl
//   /tmp/vqbl [ROUNDS]
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/compute_peak.h"
#include "kernels/matvec.h"

namespace kvlab {
namespace {

#include "kernels/matvec_write_panels.inc"  // the tile's prefetch distances
#include "kernels/quant_panel_tile.inc"

}  // namespace
}  // namespace kvlab

namespace {

constexpr int kRows = 6, kPanels = 2;  // the kernel's q8_0 tile
constexpr int64_t kBlocks = 16;        // 512 inputs: two panels of 8 KiB, in L1 with x
// two panels of 512 inputs as the kernel lays them out (QuantPanelLayout: quants and scales
// together), 8.5 KiB each
constexpr kvlab::QuantPanelLayout layout(kvlab::DType::kQ8_0, kBlocks * 32);
alignas(64) uint8_t weights[kPanels * (kBlocks / 2) * (2 * 512 + 64)];
alignas(64) uint8_t x[kRows * kBlocks * 32];
alignas(64) float x_scales[kRows * kBlocks];
alignas(64) int32_t x_bias[kRows * kBlocks];

// the kernel's tile with one part of a block's work left out at a time
struct NoFlip : kvlab::AllTileParts {
  static constexpr bool kFlip = false;
};
struct NoScaleByX : kvlab::AllTileParts {
  static constexpr bool kScaleByX = false;
};
struct NoScaling : kvlab::AllTileParts {
  static constexpr bool kScale = false;
};
constexpr const char* kNames[] = {"as the kernel", "no xor (weights stored flipped)",
                                  "no d_w * d_x multiply", "no scaling (integer sums only)"};

template <class Parts>
__attribute__((noinline)) void pass(__m512 (&acc)[kRows][kPanels]) {
  // the kernel's panel layout with spread 1: panel j after panel j - 1
  kvlab::tile_blocks<kvlab::DType::kQ8_0, kRows, kPanels, Parts>(
      reinterpret_cast<const std::byte*>(weights), 1, layout, x, kBlocks * 32, x_scales, x_bias,
      kBlocks, acc);
}

// the best of five timings of `passes` passes, in G multiply-adds/s
template <class Parts>
double rate(int64_t passes, float* sink) {
  __m512 acc[kRows][kPanels] = {};
  double best_s = 1e30;
  for (int t = 0; t < 5; ++t) {
    const auto start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < passes; ++i) pass<Parts>(acc);
    best_s = std::min(
        best_s, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  for (auto& row : acc)
    for (__m512 a : row) *sink += _mm512_reduce_add_ps(a);
  return static_cast<double>(passes) * kBlocks * 32 * 16 * kRows * kPanels / best_s / 1e9;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (!__builtin_cpu_supports("avx512vnni")) {
    std::fprintf(stderr, "this CPU has no AVX-512 VNNI\n");
    return 1;
  }
  // ROUNDS: a whole number 1..1000 (the default 5); anything else is refused, not read as a prefix
  long rounds = 5;
  if (argc > 2) {
    std::fprintf(stderr, "usage: %s [ROUNDS]\n", argv[0]);
    return 2;
  }
  if (argc == 2) {
    char* end = nullptr;
    rounds = std::strtol(argv[1], &end, 10);
    if (end == argv[1] || *end != '\0' || rounds < 1 || rounds > 1000) {
      std::fprintf(stderr, "%s: ROUNDS: '%s' is not a whole number 1..1000\n", argv[0], argv[1]);
      return 2;
    }
  }
  static_assert(sizeof weights == kPanels * layout.panel_bytes());
  for (auto& w : weights) w = static_cast<uint8_t>(std::rand());
  for (int64_t j = 0; j < kPanels; ++j) {
    for (int64_t k = 0; k < kBlocks; ++k) {
      uint8_t* scales = weights + j * layout.panel_bytes() + layout.scales(k);
      for (int r = 0; r < 16; ++r) {  // f16 0.0625, little-endian
        scales[2 * r] = 0x00;
        scales[2 * r + 1] = 0x2C;
      }
    }
  }
  for (auto& q : x) q = static_cast<uint8_t>(std::rand());
  for (auto& s : x_scales) s = 0.01f;
  for (auto& s : x_bias) s = -128 * 32;
  std::printf(
      "%s, one thread, a %d-row × %d-panel q8_0 tile over %lld blocks in L1; G "
      "multiply-adds/s, medians of %d rounds (each the best of 5)\n",
      kvlab::cpu_model_name().c_str(), kRows, kPanels, static_cast<long long>(kBlocks),
      static_cast<int>(rounds));
  const int64_t passes = 20000;
  float sink = 0;
  std::vector<double> rates[5];
  for (int r = 0; r < rounds; ++r) {  // alternating, so the VM's state moves every loop alike
    rates[0].push_back(rate<kvlab::AllTileParts>(passes, &sink));
    rates[1].push_back(rate<NoFlip>(passes, &sink));
    rates[2].push_back(rate<NoScaleByX>(passes, &sink));
    rates[3].push_back(rate<NoScaling>(passes, &sink));
    const auto start = std::chrono::steady_clock::now();
    const int64_t macs = kvlab::mac_loop_int8_avx512(int64_t{1} << 22, &sink);
    rates[4].push_back(
        static_cast<double>(macs) /
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / 1e9);
  }
  const double peak = median(rates[4]);
  std::printf("%-34s %7.1f\n", "vpdpbusd register loop (peak)", peak);
  for (int v = 0; v < 4; ++v) {
    std::printf("%-34s %7.1f  (%.0f%% of the peak)\n", kNames[v], median(rates[v]),
                100.0 * median(rates[v]) / peak);
  }
  return sink == 12345.0f ? 3 : 0;
}
