// Built with AVX-512 F/BW/VL/DQ + VNNI; reached only through FastDecoder for interleaved q8_0
// weights where the decoder runs AVX-512 and the CPU has VNNI (fastest_weight_order).
#include <immintrin.h>

#include <algorithm>
#include <cmath>  // NAN in q8_0_blocks.inc
#include <cstring>

#include "kernels/matvec.h"
#include "kernels/q8_0_rows.h"

namespace kvlab {
namespace {

#include "kernels/matvec_common.inc"

constexpr int64_t kGroup = kInterleavedGroupBlocks;
constexpr int64_t kChunks = kQB / 4;  // 64-byte loads a group of sixteen blocks takes

// x's rows as the kernel reads them: each row's q8_0 quants interleaved as the weights' are
// (signed, no bias), and per block, padded with zeros to whole groups: −128 · Σ q_x (the
// starting value of the block's integer sum, which takes the weights' +128 back out) and d_x.
struct InterleavedX {
  const int8_t* quants;  // [n][blocks · 32]
  const int32_t* bias;   // [n][padded]
  const float* scales;   // [n][padded]
  int64_t quant_stride;
  int64_t block_stride;
};

// Row x in the kernel's order: each group of sixteen blocks rounded (quantize_q8_0_row_avx512)
// into a buffer, then its chunk v (elements 4v..4v+3 of every block) gathered four bytes a block
// and summed into the blocks' biases with vpdpbusd against ones.
void interleave_row(const float* x, int64_t in, int64_t blocks, int8_t* quants, int32_t* bias,
                    float* scales, int64_t padded) {
  const __m512i ones = _mm512_set1_epi8(1);
  const __m512i lanes = _mm512_setr_epi32(0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104,
                                          112, 120);  // block k's dword 0, in dwords
  for (int64_t first = 0; first < blocks; first += kGroup) {
    const int64_t m = std::min(kGroup, blocks - first);
    const auto mask = static_cast<__mmask16>((1u << m) - 1);
    alignas(64) int8_t group[kGroup * kQB];
    quantize_q8_0_row_avx512(x + first * kQB, std::min(in - first * kQB, kGroup * kQB), group, kQB,
                             scales + first, 1);
    __m512i sum = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int64_t v = 0; v < kChunks; ++v) {
      const __m512i chunk = _mm512_mask_i32gather_epi32(
          _mm512_setzero_si512(), mask,
          _mm512_add_epi32(lanes, _mm512_set1_epi32(static_cast<int>(v))), group, 4);
      _mm512_mask_storeu_epi32(quants + first * kQB + 4 * m * v, mask, chunk);
      sum = _mm512_dpbusd_epi32(sum, ones, chunk);
    }
    _mm512_mask_storeu_epi32(bias + first, mask, _mm512_mullo_epi32(sum, _mm512_set1_epi32(-128)));
  }
  for (int64_t k = blocks; k < padded; ++k) {
    bias[k] = 0;
    scales[k] = 0.0f;
  }
}

// The four vectors' lane sums, a 128-bit quarter at a time: quarter q of the result holds the
// sums of a, b, c, d over quarter q of each.
inline __m512 sum_quarters4(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
  const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
  return _mm512_add_ps(_mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                       _mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));
}

// out[i] = the sum of v_i's sixteen lanes, four vectors at once.
inline void sum_across4(__m512 v0, __m512 v1, __m512 v2, __m512 v3, float* out) {
  const __m512 quarters = sum_quarters4(v0, v1, v2, v3);
  const __m512 halves =
      _mm512_add_ps(quarters, _mm512_shuffle_f32x4(quarters, quarters, _MM_SHUFFLE(1, 0, 3, 2)));
  const __m512 sums =
      _mm512_add_ps(halves, _mm512_shuffle_f32x4(halves, halves, _MM_SHUFFLE(2, 3, 0, 1)));
  _mm_storeu_ps(out, _mm512_castps512_ps128(sums));
}

// out[i] = the sum of v_i's sixteen lanes, eight vectors at once: one transposing tree instead of
// eight reductions of their own.
inline void sum_across8(__m512 v0, __m512 v1, __m512 v2, __m512 v3, __m512 v4, __m512 v5, __m512 v6,
                        __m512 v7, float* out) {
  const __m512 low = sum_quarters4(v0, v1, v2, v3), high = sum_quarters4(v4, v5, v6, v7);
  // quarters 0, 1 of low and of high, plus quarters 2, 3: [low 0+2, low 1+3, high 0+2, high 1+3]
  const __m512 halves = _mm512_add_ps(_mm512_shuffle_f32x4(low, high, _MM_SHUFFLE(1, 0, 1, 0)),
                                      _mm512_shuffle_f32x4(low, high, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 sums =
      _mm512_add_ps(halves, _mm512_shuffle_f32x4(halves, halves, _MM_SHUFFLE(2, 3, 0, 1)));
  _mm_storeu_ps(out, _mm512_castps512_ps128(sums));
  _mm_storeu_ps(out + 4, _mm512_extractf32x4_ps(sums, 2));
}

// out[b][r] = W[r] · x_b for R interleaved weight rows (row_stride bytes apart) and NB rows of
// x, a group of sixteen blocks a pass: eight vpdpbusd per row and row of x into one vector of
// sixteen block sums, then one multiply by d_w · d_x and one add into the f32 sums. A group of
// m < 16 blocks is read with m-lane masks (zeros beyond: no sum, no scale). kPrefetch: the
// rows `ahead` bytes on are prefetched meanwhile.
template <int R, int NB, bool kPrefetch>
void tile_groups(const std::byte* w, int64_t row_stride, int64_t ahead, int64_t blocks,
                 const InterleavedX& x, int64_t b0, float* out) {
  __m512 acc[NB][R] = {};
  const std::byte* next = w + ahead;
  const std::byte* scales = w + blocks * kQB;
  for (int64_t first = 0; first < blocks; first += kGroup) {
    const int64_t m = std::min(kGroup, blocks - first);
    const __mmask16 mask = static_cast<__mmask16>((1u << m) - 1);
    const std::byte* group = w + first * kQB;
    __m512i dot[NB][R];
#pragma GCC unroll 4
    for (int b = 0; b < NB; ++b) {
      const __m512i start = _mm512_loadu_si512(x.bias + (b0 + b) * x.block_stride + first);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) dot[b][r] = start;
    }
#pragma GCC unroll 8
    for (int64_t v = 0; v < kChunks; ++v) {
      __m512i wv[R];
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const std::byte* chunk = group + r * row_stride + 4 * m * v;
        if constexpr (kPrefetch) {
          _mm_prefetch(reinterpret_cast<const char*>(chunk + (next - w)), _MM_HINT_T0);
        }
        wv[r] = _mm512_maskz_loadu_epi32(mask, chunk);
      }
#pragma GCC unroll 4
      for (int b = 0; b < NB; ++b) {
        const __m512i xv = _mm512_maskz_loadu_epi32(
            mask, x.quants + (b0 + b) * x.quant_stride + first * kQB + 4 * m * v);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) dot[b][r] = _mm512_dpbusd_epi32(dot[b][r], wv[r], xv);
      }
    }
    __m512 dw[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const std::byte* row_scales = scales + r * row_stride + first * 2;
      if constexpr (kPrefetch) {
        _mm_prefetch(reinterpret_cast<const char*>(row_scales + (next - w)), _MM_HINT_T0);
      }
      dw[r] = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, row_scales));
    }
#pragma GCC unroll 4
    for (int b = 0; b < NB; ++b) {
      const __m512 dx = _mm512_loadu_ps(x.scales + (b0 + b) * x.block_stride + first);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        acc[b][r] =
            _mm512_fmadd_ps(_mm512_mul_ps(dw[r], dx), _mm512_cvtepi32_ps(dot[b][r]), acc[b][r]);
      }
    }
  }
  if constexpr (R == 4 && NB >= 2) {
    sum_across8(acc[0][0], acc[0][1], acc[0][2], acc[0][3], acc[1][0], acc[1][1], acc[1][2],
                acc[1][3], out);
    if constexpr (NB == 3) sum_across4(acc[2][0], acc[2][1], acc[2][2], acc[2][3], out + 8);
  } else {
#pragma GCC unroll 4
    for (int b = 0; b < NB; ++b)
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) out[b * R + r] = _mm512_reduce_add_ps(acc[b][r]);
  }
}

// How far ahead in its run a tile prefetches: whole rows, at least 2 KiB (half of
// matvec_rows.inc's kPrefetchBytes; 1.03–1.21× at 1–16 rows of x on the Zen 5 VM,
// docs/kernels/dense-decode.md).
constexpr int64_t kAheadBytes = 2048;

// Rows of x a tile takes: three (3 × 4 rows' integer and f32 sums, 24 of the 32
// registers; 1.07–1.16× two at 16–64 rows, docs/kernels/dense-decode.md), the last two together.
constexpr int kBatch = 3;
// Weight bytes a task keeps in L1 while each tile of x passes over them, beyond one tile of x:
// up to eight sets of four rows (two at 4,096 inputs), so a tile of x read from L2 serves them
// all (at 16–64 rows of x 1.03–1.13× one set on the Zen 5 VM; docs/kernels/dense-decode.md).
constexpr int64_t kSetBytes = 36 * 1024;
constexpr int64_t kMaxSets = 8;
// From four tiles of x (at 4–8 rows sets measured 0.93–0.97× one).
constexpr int64_t kSetsMinRows = 4 * kBatch;

// y for output rows [first, last): four weight rows at a time in walk_rows's four runs (then
// one), against kBatch rows of x at a time (then two, then one). From kSetsMinRows rows of x,
// up to kMaxSets such sets of rows take each tile of x in turn. The first rows of x bring the
// weight rows into L1 and prefetch the next.
void rows_range(const MatVecParams& p, const InterleavedX& x, int64_t first, int64_t last) {
  const int64_t stride = row_bytes(DType::kQ8_0, p.in);
  const int64_t ahead = (kAheadBytes + stride - 1) / stride * stride;
  const int64_t blocks = (p.in + kQB - 1) / kQB;
  const auto* weight = static_cast<const std::byte*>(p.weight);
  // rows o + r · spread against rows b.. of x
  auto tile = [&]<int R, int NB>(int64_t o, int64_t spread, int64_t b) {
    alignas(64) float out[R * NB];
    const std::byte* w = weight + o * stride;
    if (b == 0) {
      tile_groups<R, NB, true>(w, spread * stride, ahead, blocks, x, b, out);
    } else {
      tile_groups<R, NB, false>(w, spread * stride, ahead, blocks, x, b, out);
    }
    write_tile<R, NB>(p, o, spread, b, out);
  };
  // the sets of R rows o + k (k < sets, each R rows `spread` apart) against each tile of x in turn
  auto tiles = [&]<int R>(int64_t o, int64_t sets, int64_t spread) {
    int64_t b = 0;
    for (; b + kBatch <= p.n; b += kBatch)
      for (int64_t k = 0; k < sets; ++k) tile.template operator()<R, kBatch>(o + k, spread, b);
    if (b + 2 <= p.n) {
      for (int64_t k = 0; k < sets; ++k) tile.template operator()<R, 2>(o + k, spread, b);
      b += 2;
    }
    for (; b < p.n; ++b)
      for (int64_t k = 0; k < sets; ++k) tile.template operator()<R, 1>(o + k, spread, b);
  };
  const int64_t max_sets =
      p.n < kSetsMinRows ? 1 : std::clamp<int64_t>(kSetBytes / (4 * stride), 1, kMaxSets);
  // walk_rows's runs, max_sets sets of four at a time
  const int64_t spread = (last - first) / 4;
  for (int64_t o = first; o < first + spread; o += max_sets) {
    tiles.template operator()<4>(o, std::min(max_sets, first + spread - o), spread);
  }
  for (int64_t o = first + 4 * spread; o < last; ++o) tiles.template operator()<1>(o, 1, 1);
}

}  // namespace

void matvec_q8_0_interleaved(const MatVecParams& p, ThreadPool& pool, MatVecScratch& scratch) {
  require_weights(p, "matvec_q8_0_interleaved", WeightOrder::kInterleaved, DType::kQ8_0);
  reserve_matvec_scratch(p, scratch);
  const int64_t xs = p.x_stride > 0 ? p.x_stride : p.in;
  const int64_t blocks = (p.in + kQB - 1) / kQB;
  const int64_t padded = interleaved_q8_0_padded_blocks(p.in);
  const InterleavedX x{scratch.quants.data(), scratch.block_bias.data(),
                       scratch.block_scales.data(), blocks * kQB, padded};
  auto prepare = [&](int64_t b) {
    interleave_row(p.x + b * xs, p.in, blocks, scratch.quants.data() + b * x.quant_stride,
                   scratch.block_bias.data() + b * padded, scratch.block_scales.data() + b * padded,
                   padded);
  };
  // a batch's rows of x are rounded on the pool, not on one thread
  if (p.n >= 4) {
    pool.parallel_for(p.n, prepare);
  } else {
    for (int64_t b = 0; b < p.n; ++b) prepare(b);
  }
  for_each_task(pool, p.out, rows_per_task(p.in, p.n, p.out, pool.size()),
                [&](int64_t first, int64_t last) { rows_range(p, x, first, last); });
}

}  // namespace kvlab
