// Built with AVX-512 F/BW/VL/DQ + BF16; reached only through FastDecoder where the CPU has
// AVX-512 BF16 (matvec_runs_bf16_products).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/bf16_rows.h"
#include "kernels/matvec.h"

namespace kvlab {
namespace {

#include "kernels/matvec_bf16_rounding.inc"
#include "kernels/matvec_rows.inc"

constexpr int64_t kPairChunk = kBf16RowChunk;  // bf16 elements a vdpbf16ps takes from each operand

// The sums of sixteen vectors v[b][r]: lane 4b + r of the result is the sum of v[b][r]'s lanes
// (pairs within 128-bit lanes, then quads, then across the 128-bit lanes).
inline __attribute__((always_inline)) __m512 sum_sixteen(const __m512 (&v)[4][4]) {
  __m512 pairs[8], quads[4], halves[2];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    const __m512 a = v[i / 2][i % 2 * 2], b = v[i / 2][i % 2 * 2 + 1];
    pairs[i] = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(pairs[2 * i]), b = _mm512_castps_pd(pairs[2 * i + 1]);
    quads[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i) {
    halves[i] = _mm512_add_ps(_mm512_shuffle_f32x4(quads[2 * i], quads[2 * i + 1], 0x88),
                              _mm512_shuffle_f32x4(quads[2 * i], quads[2 * i + 1], 0xDD));
  }
  return _mm512_add_ps(_mm512_shuffle_f32x4(halves[0], halves[1], 0x88),
                       _mm512_shuffle_f32x4(halves[0], halves[1], 0xDD));
}

// out[b][r] = W[r] · x_b for R bf16 weight rows (row_stride bytes apart) and NB rows of x
// rounded to bf16, 32 elements a pass: each vdpbf16ps lane sums one element pair's products in
// f32. The weight tail is masked; x's rows are zero-padded. Every loop over b and r is unrolled
// by pragma: left to g++ 12's -O3 heuristics, the accumulators lived in memory, stored on every
// pass (half the kernel's rate).
template <int R, int NB, bool kPrefetch>
void tile_pairs(const std::byte* w, int64_t row_stride, int64_t ahead, int64_t in,
                const uint16_t* x, int64_t xs, float* out) {
  __m512 acc[NB][R];
#pragma GCC unroll 4
  for (int b = 0; b < NB; ++b)
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[b][r] = _mm512_setzero_ps();
  const std::byte* next = w + ahead;
  for (int64_t i = 0; i < in; i += kPairChunk) {
    const __mmask32 mask =
        in - i >= kPairChunk ? ~__mmask32{0} : static_cast<__mmask32>((1u << (in - i)) - 1);
    __m512bh wv[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      if constexpr (kPrefetch) {
        _mm_prefetch(reinterpret_cast<const char*>(next + r * row_stride + i * 2), _MM_HINT_T0);
      }
      wv[r] =
          reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(mask, w + r * row_stride + i * 2));
    }
#pragma GCC unroll 4
    for (int b = 0; b < NB; ++b) {
      const __m512bh xv = reinterpret_cast<__m512bh>(_mm512_loadu_si512(x + b * xs + i));
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[b][r] = _mm512_dpbf16_ps(acc[b][r], wv[r], xv);
    }
  }
  if constexpr (NB * R == 16) {
    _mm512_storeu_ps(out, sum_sixteen(acc));
  } else {
#pragma GCC unroll 4
    for (int b = 0; b < NB; ++b)
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) out[b * R + r] = _mm512_reduce_add_ps(acc[b][r]);
  }
}

// y for output rows [first, last): four weight rows at a time (walk_rows's four runs; then one)
// against four rows of x at a time (then the rest together).
void rows_range(const MatVecParams& p, const uint16_t* x, int64_t xs, int64_t first, int64_t last) {
  const int64_t stride = row_bytes(DType::kBf16, p.in);
  const int64_t ahead = prefetch_ahead(stride);
  const auto* weight = static_cast<const std::byte*>(p.weight);
  // rows o + r · spread against rows b.. of x
  auto tile = [&]<int R, int NB>(int64_t o, int64_t spread, int64_t b) {
    alignas(64) float out[R * NB];
    // the first rows of x bring the weight rows into L1 and prefetch the next ones; the rest
    // find them there
    if (b == 0) {
      tile_pairs<R, NB, true>(weight + o * stride, spread * stride, ahead, p.in, x, xs, out);
    } else {
      tile_pairs<R, NB, false>(weight + o * stride, spread * stride, ahead, p.in, x + b * xs, xs,
                               out);
    }
    write_tile<R, NB>(p, o, spread, b, out);
  };
  walk_rows(first, last, [&]<int R>(int64_t o, int64_t spread) {
    int64_t b = 0;
    for (; b + 4 <= p.n; b += 4) tile.template operator()<R, 4>(o, spread, b);
    switch (p.n - b) {
      case 3:
        tile.template operator()<R, 3>(o, spread, b);
        break;
      case 2:
        tile.template operator()<R, 2>(o, spread, b);
        break;
      case 1:
        tile.template operator()<R, 1>(o, spread, b);
        break;
      default:
        break;  // 0: every row of x done
    }
  });
}

}  // namespace

void matvec_bf16_products(const MatVecParams& p, ThreadPool& pool, MatVecScratch& scratch) {
  require_weights(p, "matvec_bf16_products", WeightOrder::kRows, DType::kBf16);
  reserve_matvec_scratch(p, scratch);
  const int64_t xs = bf16_row_stride(p.in);
  round_rows(p, scratch.bf16.data(), xs, pool);
  const uint16_t* x = scratch.bf16.data();
  for_each_task(pool, p.out, rows_per_task(p.in, p.n, p.out, pool.size()),
                min_rows_per_task(p.in, p.n),
                [&](int64_t first, int64_t last) { rows_range(p, x, xs, first, last); });
}

}  // namespace kvlab
