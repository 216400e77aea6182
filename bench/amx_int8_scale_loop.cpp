// The AMX int8 dense kernel's inner loop (matvec_amx_quant_panels.cpp's blocks_times_rows: a tile
// multiply (tdpbssd) a q8_0 block of 32 inputs, its 16 × 16 int32 sums stored and scaled by
// d_w · d_x into f32 sums in registers) on one thread, every operand in L1, 32 blocks a pass (1,024
// inputs). G multiply-adds/s for: each pair of blocks multiplied, then stored and scaled, before
// the next pair's multiplies (the kernel before the seventeenth session); two sets of sums tiles,
// the next pair multiplied while this one is scaled (the kernel now); the tiles and stores without
// the scaling; the scaling without the tiles. Not part of the build:
//   g++ -O2 -std=c++20 -Isrc -mamx-tile -mamx-int8 -mavx512f -mavx512bw -mavx512vl -mf16c -mfma
//       bench/amx_int8_scale_loop.cpp -o /tmp/aisl
//   /tmp/aisl
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "kernels/amx_tiles.h"

namespace {

constexpr int kBlocks = 32;
alignas(64) int8_t weights[kBlocks * 512], x[kBlocks * 512];
alignas(64) uint16_t weight_scales[kBlocks * 16];  // f16
alignas(64) float x_scales[kBlocks * 16];
alignas(64) int32_t sums[2 * 256];

enum class Loop { kOnePairAtATime, kTwoSets, kTilesOnly, kScaleOnly };

inline __attribute__((always_inline)) void scale_into(const int32_t* s, int k, __m512 (&acc)[16]) {
  const __m512 dw =
      _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(weight_scales + k * 16)));
#pragma GCC unroll 16
  for (int m = 0; m < 16; ++m) {
    const __m512 exact = _mm512_cvtepi32_ps(_mm512_load_si512(s + m * 16));
    acc[m] =
        _mm512_fmadd_ps(exact, _mm512_mul_ps(dw, _mm512_set1_ps(x_scales[k * 16 + m])), acc[m]);
  }
}

// blocks k, k + 1 into sums tiles 0, 1 (kSet 0) or 6, 7 (kSet 1)
template <int kSet>
inline __attribute__((always_inline)) void multiply_pair(int k) {
  if constexpr (kSet == 0) {
    _tile_zero(0);
    _tile_zero(1);
  } else {
    _tile_zero(6);
    _tile_zero(7);
  }
  _tile_loadd(2, x + k * 512, 32);
  _tile_loadd(4, weights + k * 512, 64);
  _tile_loadd(3, x + (k + 1) * 512, 32);
  _tile_loadd(5, weights + (k + 1) * 512, 64);
  if constexpr (kSet == 0) {
    _tile_dpbssd(0, 2, 4);
    _tile_dpbssd(1, 3, 5);
  } else {
    _tile_dpbssd(6, 2, 4);
    _tile_dpbssd(7, 3, 5);
  }
}

template <int kSet>
inline __attribute__((always_inline)) void store_pair() {
  if constexpr (kSet == 0) {
    _tile_stored(0, sums, 64);
    _tile_stored(1, sums + 256, 64);
  } else {
    _tile_stored(6, sums, 64);
    _tile_stored(7, sums + 256, 64);
  }
}

template <Loop kLoop>
__attribute__((noinline)) void pass(__m512 (&acc)[16]) {
  if constexpr (kLoop == Loop::kOnePairAtATime || kLoop == Loop::kTilesOnly) {
    for (int k = 0; k < kBlocks; k += 2) {
      multiply_pair<0>(k);
      store_pair<0>();
      if constexpr (kLoop == Loop::kOnePairAtATime) {
        scale_into(sums, k, acc);
        scale_into(sums + 256, k + 1, acc);
      }
    }
  } else if constexpr (kLoop == Loop::kTwoSets) {
    multiply_pair<0>(0);
    for (int k = 0; k < kBlocks; k += 4) {
      multiply_pair<1>(k + 2);
      store_pair<0>();
      scale_into(sums, k, acc);
      scale_into(sums + 256, k + 1, acc);
      if (k + 4 < kBlocks) multiply_pair<0>(k + 4);
      store_pair<1>();
      scale_into(sums, k + 2, acc);
      scale_into(sums + 256, k + 3, acc);
    }
  } else {
    for (int k = 0; k < kBlocks; ++k) scale_into(sums + 256 * (k & 1), k, acc);
  }
}

template <Loop kLoop>
double rate() {
  // as the kernel's q8_0_tiles_config: sums in tmm0, 1, 6, 7, x in tmm2, 3, weights in tmm4, 5
  kvlab::AmxTileConfig c = kvlab::full_tiles_config(8);
  kvlab::set_q8_0_block_operands(c, 2, 4);
  kvlab::set_q8_0_block_operands(c, 3, 5);
  _tile_loadconfig(&c);
  __m512 acc[16];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  constexpr long kRounds = 200000;
  const auto start = std::chrono::steady_clock::now();
  for (long r = 0; r < kRounds; ++r) pass<kLoop>(acc);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  _tile_release();
  alignas(64) float out[16];
  _mm512_store_ps(out, acc[3]);
  if (out[0] == 1.2345f) std::puts("");  // keeps the sums live
  return kRounds * kBlocks * 16.0 * 16 * 32 / seconds / 1e9;
}

}  // namespace

int main() {
  if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) != 0) {
    std::fprintf(stderr, "no AMX tile permission on this CPU / kernel\n");
    return 1;
  }
  std::memset(weights, 1, sizeof weights);
  std::memset(x, 1, sizeof x);
  for (uint16_t& d : weight_scales) d = 0x3C00;  // 1.0 in f16
  for (float& d : x_scales) d = 1e-3f;
  for (int round = 0; round < 3; ++round) {
    std::printf(
        "one pair at a time %.0f, two sets of sums tiles %.0f, tiles and stores only %.0f, "
        "scaling only %.0f G multiply-adds/s\n",
        rate<Loop::kOnePairAtATime>(), rate<Loop::kTwoSets>(), rate<Loop::kTilesOnly>(),
        rate<Loop::kScaleOnly>());
  }
}
