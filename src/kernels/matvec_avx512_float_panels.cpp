// Built with AVX-512 F/BW/VL/DQ (+ F16C); reached only through FastDecoder where f32 or f16
// weights are stored in panels (fastest_weight_order: a decoder that runs AVX-512).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "kernels/matvec.h"

namespace kvlab {
namespace {

#include "kernels/matvec_panel_tiles.inc"
#include "kernels/matvec_rows.inc"
#include "kernels/matvec_write_panels.inc"

// The tiles: kTileRows and kFirstTileRows (matvec_write_panels.inc), as matvec_bf16_panels'.
// How far ahead, in its own panel, a tile prefetches: the first tiles (the ones that read the
// panels from memory) 4 KiB, or kFewRowsAheadBytes at most kFewRows rows of x
// (matvec_write_panels.inc); the tiles after the first none.
constexpr int64_t kFirstTileAheadBytes = 4096;

// The sixteen rows' elements of one input of a panel, as f32.
template <DType D>
inline __m512 panel_input(const std::byte* at) {
  if constexpr (D == DType::kF32) {
    return _mm512_loadu_ps(at);
  } else {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(at)));
  }
}

// acc[b][r] = W_panel(r) · x_b for R panels panel_stride bytes apart and NB rows of x (xs
// elements apart), in f32: each input of a panel one load (f16: and one vcvtph2ps), then one FMA
// per row of x against its element broadcast. kAheadBytes > 0: each 64-byte line of a panel
// prefetched that far ahead.
template <DType D, int R, int NB, int64_t kAheadBytes>
inline __attribute__((always_inline)) void products(const std::byte* w, int64_t panel_stride,
                                                    int64_t in, const float* x, int64_t xs,
                                                    __m512 (&acc)[NB][R]) {
  constexpr int64_t kInputBytes = kPanelRows * dtype_bytes(D);  // 64 (f32) or 32 (f16)
#pragma GCC unroll 16
  for (int b = 0; b < NB; ++b)
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[b][r] = _mm512_setzero_ps();
  const auto input = [&]<bool kPrefetch>(int64_t i) __attribute__((always_inline)) {
    __m512 wv[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const std::byte* at = w + r * panel_stride + i * kInputBytes;
      if constexpr (kPrefetch && kAheadBytes > 0) {
        _mm_prefetch(reinterpret_cast<const char*>(at + kAheadBytes), _MM_HINT_T0);
      }
      wv[r] = panel_input<D>(at);
    }
#pragma GCC unroll 16
    for (int b = 0; b < NB; ++b) {
      const __m512 xv = _mm512_set1_ps(x[b * xs + i]);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[b][r] = _mm512_fmadd_ps(wv[r], xv, acc[b][r]);
    }
  };
  // two inputs a pass: two lines of f32 panels, one of f16 (prefetched once)
  int64_t i = 0;
  for (; i + 2 <= in; i += 2) {
    input.template operator()<true>(i);
    input.template operator()<D == DType::kF32>(i + 1);
  }
  if (i < in) input.template operator()<false>(i);
}

// y for panels [first, last): four panels at a time (walk_rows's four runs; then one), against
// rows of x in f32: from kFirstTileRows rows that many first (two panels at a time), then the
// rest in tiles of at most kTileRows (group_tiles).
template <DType D>
void panel_range(const MatVecParams& p, int64_t first, int64_t last) {
  const int64_t stride = panel_bytes(D, kPanelRows, p.in);  // bytes a panel
  const int64_t xs = p.x_stride > 0 ? p.x_stride : p.in;
  const auto* weight = static_cast<const std::byte*>(p.weight);
  auto tile = [&]<int R, int NB>(int64_t panel, int64_t spread, int64_t b) {
    __m512 acc[NB][R];
    const std::byte* w = weight + panel * stride;
    const float* x = p.x + b * xs;
    if (b > 0) {
      products<D, R, NB, 0>(w, spread * stride, p.in, x, xs, acc);
    } else if (p.n <= kFewRows) {
      products<D, R, NB, kFewRowsAheadBytes>(w, spread * stride, p.in, x, xs, acc);
    } else {
      products<D, R, NB, kFirstTileAheadBytes>(w, spread * stride, p.in, x, xs, acc);
    }
    write_panels<R, NB>(p, panel, spread, b, acc);
  };
  walk_rows(first, last, [&]<int R>(int64_t panel, int64_t spread) {
    group_tiles<kFirstTileRows, kTileRows, R>(p.n, panel, spread, tile);
  });
}

}  // namespace

void matvec_float_panels(const MatVecParams& p, ThreadPool& pool, MatVecScratch& scratch) {
  matvec_float_panels(&p, 1, pool, scratch);
}

void matvec_float_panels(const MatVecParams* params, int64_t count, ThreadPool& pool,
                         MatVecScratch&) {
  require_shared_float_panels(params, count, "matvec_float_panels");
  const MatVecParams& p = params[0];  // x as every product reads it
  if (p.n == 0) return;
  for_each_panel_task(
      params, count, pool, p.n >= 2, [&](const MatVecParams& product, int64_t first, int64_t last) {
        product.weight_dtype == DType::kF32 ? panel_range<DType::kF32>(product, first, last)
                                            : panel_range<DType::kF16>(product, first, last);
      });
}

}  // namespace kvlab
