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
// after the two above, which it uses
#include "kernels/matvec_avx2_panel_tiles.inc"

// Rows of x a tile of one panel takes: its sixteen rows are two vectors of eight, so six rows of x
// are 12 accumulators, with the panel's two loads and x's broadcast 15 of the 16 registers; bf16
// five (its mask for the odd elements takes one more, and at six g++ spilled sums).
template <DType D>
constexpr int kTileRows = D == DType::kBf16 ? 5 : 6;
// Rows of x a tile of two panels takes (up to kPairTileMaxRows rows of x): f32 three, 12 sums; f16
// and bf16 two (at three g++ spilled f16's sums, which ran 0.6-0.7x).
template <DType D>
constexpr int kPairTileRows = D == DType::kF32 ? 3 : 2;

// How far ahead, in its own panel, the tiles that read the panels from memory (the first rows of
// x) prefetch: 2 KiB. (1 KiB, which the AVX-512 panel kernels take at one row, measured mixed here
// at one row on a Zen 5 under KVLAB_CPU_ISA=avx2: f32 9–15% faster, bf16 2–4% slower.)
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

// y for panels [first, last) in walk_panel_tiles's tiles: two panels × up to kPairTileRows<D> rows
// of x, or one panel × up to kTileRows<D>.
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
  walk_panel_tiles<kPairTileRows<D>, kTileRows<D>>(p.n, first, last, tile);
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
