// Built with -mavx2 -mfma -mf16c; reached only through FastDecoder where the decoder runs AVX2 and
// f32, f16 or bf16 weights are stored in panels (fastest_weight_order).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "kernels/matvec.h"

namespace kvlab {
namespace {

#include "kernels/matvec_panel_tiles.inc"
#include "kernels/matvec_rows.inc"

// Rows of x a tile of one panel takes: its sixteen rows are two vectors of eight, so six rows of x
// are 12 accumulators, with the panel's two loads and x's broadcast 15 of the 16 registers; bf16
// five (its mask for the odd elements takes one more, and at six g++ spilled sums).
template <DType D>
constexpr int kTileRows = D == DType::kBf16 ? 5 : 6;
// Rows of x a tile of two panels takes (up to kPairTileMaxRows rows of x, where the weights' two
// streams from memory are the cost): f32 three, 12 sums; f16 and bf16 two (at three g++ spilled
// f16's sums, which ran 0.6-0.7x).
template <DType D>
constexpr int kPairTileRows = D == DType::kF32 ? 3 : 2;
constexpr int64_t kPairTileMaxRows = 4;

// How far ahead, in its own panel, the tiles that read the panels from memory (the first rows of
// x) prefetch: 2 KiB, as the AVX-512 panel kernels' one row.
constexpr int64_t kAheadBytes = 2048;

// acc[b][r][h] = rows 8h..8h+7 of W_panel(r) · x_b for R panels (panel_stride bytes apart) and NB
// rows of x (xs elements apart), in f32. f32 and f16: each input of a panel two loads of eight
// rows (f16 widened by vcvtph2ps), then two FMAs per row of x against its element broadcast.
// bf16: each pair of inputs (a 64-byte line of sixteen rows' pairs) loaded as two vectors of eight
// rows' pairs, their even elements (the low halves shifted up) against x's first element, then
// loaded again (from L1) for their odd ones (the high halves masked) against the second: the same
// products as the widening row kernels. kPrefetch: each line of a panel prefetched kAheadBytes
// ahead.
template <DType D, int R, int NB, bool kPrefetch>
inline __attribute__((always_inline)) void products(const std::byte* w, int64_t panel_stride,
                                                    int64_t in, const float* x, int64_t xs,
                                                    __m256 (&out)[NB][R][2]) {
  // sums of their own, copied to `out` at the end: with `out`'s address passed on to the write,
  // g++ stored every sum to the stack after each FMA
  __m256 acc[NB][R][2];
#pragma GCC unroll 8
  for (int b = 0; b < NB; ++b)
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[b][r][0] = acc[b][r][1] = _mm256_setzero_ps();
  const auto fma_rows = [&](int r, __m256 w0, __m256 w1, int64_t i) __attribute__((always_inline)) {
#pragma GCC unroll 8
    for (int b = 0; b < NB; ++b) {
      const __m256 xv = _mm256_broadcast_ss(x + b * xs + i);
      acc[b][r][0] = _mm256_fmadd_ps(w0, xv, acc[b][r][0]);
      acc[b][r][1] = _mm256_fmadd_ps(w1, xv, acc[b][r][1]);
    }
  };
  const auto prefetch = [&](const std::byte* at) __attribute__((always_inline)) {
    if constexpr (kPrefetch) {
      _mm_prefetch(reinterpret_cast<const char*>(at + kAheadBytes), _MM_HINT_T0);
    }
  };
  if constexpr (D == DType::kBf16) {
    const __m256i high = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
    const auto load = [](const std::byte* at) {
      return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at));
    };
    const auto even = [](__m256i v) { return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)); };
    const auto odd = [&](__m256i v) { return _mm256_castsi256_ps(_mm256_and_si256(v, high)); };
    const int64_t pairs = in / 2;
    for (int64_t j = 0; j < pairs; ++j) {
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const std::byte* at = w + r * panel_stride + j * 64;
        prefetch(at);
        fma_rows(r, even(load(at)), even(load(at + 32)), 2 * j);
        fma_rows(r, odd(load(at)), odd(load(at + 32)), 2 * j + 1);
      }
    }
    if (in % 2 == 1) {  // the last input alone: its pair's second element is padding
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const std::byte* at = w + r * panel_stride + pairs * 64;
        fma_rows(r, even(load(at)), even(load(at + 32)), in - 1);
      }
    }
  } else {
    constexpr int64_t kInputBytes = kPanelRows * dtype_bytes(D);  // 64 (f32) or 32 (f16)
    const auto load8 = [](const std::byte* at) {
      if constexpr (D == DType::kF32) {
        return _mm256_loadu_ps(reinterpret_cast<const float*>(at));
      } else {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at)));
      }
    };
    for (int64_t i = 0; i < in; ++i) {
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const std::byte* at = w + r * panel_stride + i * kInputBytes;
        if (D == DType::kF32 || i % 2 == 0) prefetch(at);  // once a line
        fma_rows(r, load8(at), load8(at + kInputBytes / 2), i);
      }
    }
  }
#pragma GCC unroll 8
  for (int b = 0; b < NB; ++b)
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) out[b][r][0] = acc[b][r][0], out[b][r][1] = acc[b][r][1];
}

// y[b + j][rows of panel (first + r · spread)] = acc[j][r] (+ bias), the last panel's padding
// rows left out.
template <int R, int NB>
void write_tile(const MatVecParams& p, int64_t first, int64_t spread, int64_t b,
                const __m256 (&acc)[NB][R][2]) {
  const int64_t ys = p.y_stride > 0 ? p.y_stride : p.out;
  for (int r = 0; r < R; ++r) {
    const int64_t o = (first + r * spread) * kPanelRows;
    const int64_t rows = std::min(kPanelRows, p.out - o);
    for (int j = 0; j < NB; ++j) {
      alignas(32) float sums[kPanelRows];
      _mm256_store_ps(sums, acc[j][r][0]);
      _mm256_store_ps(sums + 8, acc[j][r][1]);
      float* y = p.y + (b + j) * ys + o;
      for (int64_t k = 0; k < rows; ++k) y[k] = sums[k] + (p.bias != nullptr ? p.bias[o + k] : 0);
    }
  }
}

// y for panels [first, last): at one row of x four panels at a time (walk_rows's four runs; then
// one); up to kPairTileMaxRows rows two panels a tile; from there each panel of a group in turn.
// The rows of x go in tiles of at most kPairTileRows<D> or kTileRows<D> (the first from memory,
// the rest from cache, sharing their rows evenly). Pairs measured 1.0-1.2x single panels at 2-4
// rows of x and no faster above, where one panel × six rows loads less a multiply-add
// (docs/kernels/dense-decode.md).
template <DType D>
void panel_range(const MatVecParams& p, int64_t first, int64_t last) {
  const int64_t stride = panel_bytes(D, kPanelRows, p.in);  // bytes a panel
  const int64_t xs = p.x_stride > 0 ? p.x_stride : p.in;
  const auto* weight = static_cast<const std::byte*>(p.weight);
  auto tile = [&]<int R, int NB>(int64_t panel, int64_t spread, int64_t b) {
    __m256 acc[NB][R][2];
    const std::byte* w = weight + panel * stride;
    if (b == 0) {
      products<D, R, NB, true>(w, spread * stride, p.in, p.x, xs, acc);
    } else {
      products<D, R, NB, false>(w, spread * stride, p.in, p.x + b * xs, xs, acc);
    }
    write_tile<R, NB>(p, panel, spread, b, acc);
  };
  // the rows of x in tiles of RP panels from `panel` and at most kMost rows (the first from
  // memory, the rest from cache, sharing their rows evenly)
  const auto rows_in_tiles = [&]<int RP, int kMost>(int64_t panel, int64_t spread) {
    for (int64_t b = 0; b < p.n;) {
      const int64_t rows =
          b == 0 ? std::min<int64_t>(p.n, kMost) : balanced_tile_rows(p.n - b, kMost);
      with_tile_rows<kMost>(rows,
                            [&]<int NB>() { tile.template operator()<RP, NB>(panel, spread, b); });
      b += rows;
    }
  };
  walk_rows(first, last, [&]<int R>(int64_t panel, int64_t spread) {
    if (p.n == 1) {
      tile.template operator()<R, 1>(panel, spread, 0);
    } else if (R == 4 && p.n <= kPairTileMaxRows) {  // two runs a tile: two streams
      rows_in_tiles.template operator()<2, kPairTileRows<D>>(panel, spread);
      rows_in_tiles.template operator()<2, kPairTileRows<D>>(panel + 2 * spread, spread);
    } else {
      for (int r = 0; r < R; ++r) {
        rows_in_tiles.template operator()<1, kTileRows<D>>(panel + r * spread, 1);
      }
    }
  });
}

}  // namespace

void matvec_avx2_panels(const MatVecParams& p, ThreadPool& pool, MatVecScratch& scratch) {
  matvec_avx2_panels(&p, 1, pool, scratch);
}

void matvec_avx2_panels(const MatVecParams* params, int64_t count, ThreadPool& pool,
                        MatVecScratch&) {
  require_shared_x(params, count, "matvec_avx2_panels");
  for (int64_t i = 0; i < count; ++i) {
    require_weights(params[i], "matvec_avx2_panels", WeightOrder::kPanels);
    if (!takes_float_panels(params[i].weight_dtype) && params[i].weight_dtype != DType::kBf16) {
      throw std::invalid_argument("matvec_avx2_panels: weight_dtype: must be f32, f16 or bf16");
    }
  }
  const MatVecParams& p = params[0];  // x as every product reads it
  if (p.n == 0) return;
  for_each_panel_task(params, count, pool, p.n >= 2,
                      [&](const MatVecParams& product, int64_t first, int64_t last) {
                        const DType dtype = product.weight_dtype;  // checked above
                        if (dtype == DType::kF32) {
                          panel_range<DType::kF32>(product, first, last);
                        } else if (dtype == DType::kF16) {
                          panel_range<DType::kF16>(product, first, last);
                        } else {
                          panel_range<DType::kBf16>(product, first, last);
                        }
                      });
}

}  // namespace kvlab
