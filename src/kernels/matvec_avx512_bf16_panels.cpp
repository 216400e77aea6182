// Built with AVX-512 F/BW/VL/DQ + BF16; reached only through FastDecoder where the CPU has
// AVX-512 BF16 and the weights are stored in panels (fastest_weight_order).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "kernels/bf16_rows.h"
#include "kernels/matvec.h"

namespace kvlab {
namespace {

#include "kernels/matvec_bf16_rounding.inc"
#include "kernels/matvec_panel_tiles.inc"
#include "kernels/matvec_rows.inc"
#include "kernels/matvec_write_panels.inc"

// The tiles: kTileRows and kFirstTileRows (matvec_write_panels.inc).
// How far ahead the first tile's twelve-row tiles prefetch: 4 KiB (the six-row ones' 2 KiB
// measured 1–6% slower at 16–32 rows on the Zen 5 VM, 8 KiB no faster: docs/kernels/
// dense-decode.md).
constexpr int64_t kFirstTileAheadElements = 2048;
// How far ahead, in its own panel, a tile prefetches: 2 KiB; at most kFewRows rows of x (one row
// in f32 included) kFewRowsAheadBytes (matvec_write_panels.inc).
constexpr int64_t kAheadElements = 1024;
constexpr int64_t kFewRowsAheadElements = kFewRowsAheadBytes / 2;

// acc[r] = W_panel(r) · x for one row of x in f32, R panels panel_stride elements apart: each
// 64-byte load is one pair of inputs for sixteen rows, widened to f32 as its even elements (the
// low halves shifted up) and odd ones (the high halves masked), each against its x broadcast.
// Two pairs a pass, even and odd sums apart: 2R independent chains over the FMA latency.
template <int R>
inline __attribute__((always_inline)) void one_row(const uint16_t* w, int64_t panel_stride,
                                                   int64_t in, const float* x, __m512 (&acc)[R]) {
  __m512 even[R], odd[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) even[r] = odd[r] = _mm512_setzero_ps();
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  const auto pair = [&](int r, const uint16_t* p, __m512 x0, __m512 x1) {
    const __m512i v = _mm512_loadu_si512(p);
    even[r] = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(v, 16)), x0, even[r]);
    odd[r] = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(v, high)), x1, odd[r]);
  };
  const int64_t whole_pairs = in / 2;
  int64_t j = 0;
  for (; j + 2 <= whole_pairs; j += 2) {
    const __m512 x0 = _mm512_set1_ps(x[2 * j]), x1 = _mm512_set1_ps(x[2 * j + 1]);
    const __m512 x2 = _mm512_set1_ps(x[2 * j + 2]), x3 = _mm512_set1_ps(x[2 * j + 3]);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const uint16_t* p = w + r * panel_stride + j * 2 * kPanelRows;
      _mm_prefetch(reinterpret_cast<const char*>(p + kFewRowsAheadElements), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p + kFewRowsAheadElements + 2 * kPanelRows),
                   _MM_HINT_T0);
      pair(r, p, x0, x1);
      pair(r, p + 2 * kPanelRows, x2, x3);
    }
  }
  for (; 2 * j < in; ++j) {  // the last whole pair, and an odd input's last element
    const __m512 x0 = _mm512_set1_ps(x[2 * j]);
    const __m512 x1 = _mm512_set1_ps(2 * j + 1 < in ? x[2 * j + 1] : 0.0f);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) pair(r, w + r * panel_stride + j * 2 * kPanelRows, x0, x1);
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[r] = _mm512_add_ps(even[r], odd[r]);
}

// acc[b][r] = W_panel(r) · x_b for NB rows of x rounded to bf16 (xs elements apart, zero-padded
// to whole pairs): each panel load one vdpbf16ps per row of x, x's pair broadcast. The first rows
// of x bring the panels into cache and prefetch ahead; the rest find them there.
template <int R, int NB, bool kPrefetch>
inline __attribute__((always_inline)) void products(const uint16_t* w, int64_t panel_stride,
                                                    int64_t pairs, const uint16_t* x, int64_t xs,
                                                    __m512 (&acc)[NB][R]) {
#pragma GCC unroll 16
  for (int b = 0; b < NB; ++b)
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[b][r] = _mm512_setzero_ps();
  for (int64_t j = 0; j < pairs; ++j) {
    __m512bh wv[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const uint16_t* p = w + r * panel_stride + j * 2 * kPanelRows;
      if constexpr (kPrefetch) {
        const int64_t ahead = NB == kFirstTileRows ? kFirstTileAheadElements
                              : NB <= kFewRows     ? kFewRowsAheadElements
                                                   : kAheadElements;
        _mm_prefetch(reinterpret_cast<const char*>(p + ahead), _MM_HINT_T0);
      }
      wv[r] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(p));
    }
#pragma GCC unroll 16
    for (int b = 0; b < NB; ++b) {
      int32_t both;
      std::memcpy(&both, x + b * xs + 2 * j, sizeof both);
      const __m512bh xv = reinterpret_cast<__m512bh>(_mm512_set1_epi32(both));
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[b][r] = _mm512_dpbf16_ps(acc[b][r], wv[r], xv);
    }
  }
}

// y for panels [first, last): four panels at a time (walk_rows's four runs; then one), against
// x in f32 at one row (below kBf16ProductMinRows), else rows of x rounded to bf16: from
// kFirstTileRows rows that many first (two panels at a time), then the rest in tiles of at most
// kTileRows.
void panel_range(const MatVecParams& p, const uint16_t* rounded, int64_t xs, int64_t first,
                 int64_t last) {
  const int64_t stride = bf16_panel_elements(p.in), pairs = (p.in + 1) / 2;
  const auto* weight = static_cast<const uint16_t*>(p.weight);
  auto tile = [&]<int R, int NB>(int64_t panel, int64_t spread, int64_t b) {
    __m512 acc[NB][R];
    const uint16_t* w = weight + panel * stride;
    if constexpr (NB == 1) {
      if (p.n < kBf16ProductMinRows) {
        one_row<R>(w, spread * stride, p.in, p.x, acc[0]);
        write_panels<R, NB>(p, panel, spread, b, acc);
        return;
      }
    }
    if (b == 0) {
      products<R, NB, true>(w, spread * stride, pairs, rounded, xs, acc);
    } else {
      products<R, NB, false>(w, spread * stride, pairs, rounded + b * xs, xs, acc);
    }
    write_panels<R, NB>(p, panel, spread, b, acc);
  };
  walk_rows(first, last, [&]<int R>(int64_t panel, int64_t spread) {
    group_tiles<kFirstTileRows, kTileRows, R>(p.n, panel, spread, tile);
  });
}

}  // namespace

void matvec_bf16_panels(const MatVecParams& p, ThreadPool& pool, MatVecScratch& scratch) {
  matvec_bf16_panels(&p, 1, pool, scratch);
}

void matvec_bf16_panels(const MatVecParams* params, int64_t count, ThreadPool& pool,
                        MatVecScratch& scratch) {
  require_shared_bf16_panels(params, count, "matvec_bf16_panels");
  const MatVecParams& p = params[0];  // x as every product reads it
  if (p.n == 0) return;
  reserve_matvec_scratch(p, scratch);
  // x's rows an odd number of cache lines apart: twelve rows 2 KiB apart share two L1 sets
  const int64_t xs = bf16_tile_row_stride(p.in);
  if (p.n >= kBf16ProductMinRows) round_rows(p, scratch.bf16.data(), xs, pool);
  const uint16_t* rounded = scratch.bf16.data();
  for_each_panel_task(params, count, pool, p.n >= kBf16ProductMinRows,
                      [&](const MatVecParams& product, int64_t first, int64_t last) {
                        panel_range(product, rounded, xs, first, last);
                      });
}

}  // namespace kvlab
