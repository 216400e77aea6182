// Built with -mavx2 -mfma -mf16c; reached only through FastDecoder where q8_0 or q4_0 weights are
// stored in panels and the decoder has no AVX-512 VNNI (fastest_weight_order).
#include <immintrin.h>

#include <algorithm>
#include <cmath>  // NAN in q8_0_blocks.inc
#include <cstring>
#include <utility>

#include "kernels/matvec.h"
#include "kernels/rows_in_the_job.h"

namespace kvlab {
namespace {

#include "kernels/matvec_common.inc"
#include "kernels/matvec_panel_tiles.inc"
// after the two above, which it uses
#include "kernels/matvec_avx2_panel_tiles.inc"

// Rows of x a tile of one panel takes: five. Its integer sums, the half panel's load and its
// magnitudes (q8_0) or nibbles (q4_0), x's broadcasts and the ones take 10-12 of the 16 registers;
// the f32 sums of both halves (ten) live in memory, added to once per half block. At 4-64 rows five
// measured no slower than three, whose f32 sums fit in registers, or four
// (docs/kernels/dense-decode.md). A tile of two panels (up to kPairTileMaxRows rows) takes up to
// four.
constexpr int kTileRows = 5;

// How far ahead, in its own panel, the tiles that read the panels from memory (the first rows of
// x) prefetch: 2 KiB, as the AVX2 float panel kernel.
constexpr int64_t kAheadBytes = 2048;

// Four of x's bytes, elements 4v..4v+3 of a block, in every lane.
inline __m256i x_quad(const int8_t* block, int64_t v) {
  int32_t four;
  std::memcpy(&four, block + 4 * v, sizeof four);
  return _mm256_set1_epi32(four);
}

// out[b][r][h] = rows 8h..8h+7 of panel r · x_b for R panels (panel_stride bytes apart from the
// one at `panel`, laid out as `layout` says) and NB rows of x (quants xq_stride bytes apart; scales
// and block corrections xs_stride). Each block's integer sums are exact, then one scaled add into
// the f32 sums; a 64-byte load of a panel is its two halves, eight rows each, one vector each:
// - q8_0: each half a vpmaddubsw per row of x of the weights' magnitudes (unsigned) against x's
//   four bytes broadcast, signed by the weights (vpsignb), then vpmaddwd into 32-bit sums. No
//   pair of products passes 2 · 128 · 127 = 32,512, inside int16.
// - q4_0: the nibbles (the weights + 8, unsigned) against x's bytes, low and high, summed in int16
//   for the whole block (eight sums of two products of at most 15 · 127: 30,480), then vpmaddwd;
//   the sums start at x's block correction, −8 · Σ q_x.
// kPrefetch: each line of a panel, the scales' too, prefetched kAheadBytes ahead.
template <DType D, int R, int NB, bool kPrefetch>
inline __attribute__((always_inline)) void products(const std::byte* panel, int64_t panel_stride,
                                                    const QuantPanelLayout layout, const int8_t* xq,
                                                    int64_t xq_stride, const float* xs,
                                                    const int32_t* xbias, int64_t xs_stride,
                                                    __m256 (&out)[NB][R][2]) {
  // sums of their own, copied to `out` at the end (as the float panel kernel's)
  __m256 acc[NB][R][2];
#pragma GCC unroll 8
  for (int b = 0; b < NB; ++b)
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[b][r][0] = acc[b][r][1] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t k = 0; k < layout.blocks; ++k) {
    const std::byte* block = panel + layout.quants(k);
    const std::byte* scales = panel + layout.scales(k);
    const bool ends_pair = layout.ends_pair(k);
    if constexpr (kPrefetch) {
      if (ends_pair) {  // the scales' line
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          _mm_prefetch(reinterpret_cast<const char*>(scales + r * panel_stride + kAheadBytes),
                       _MM_HINT_T0);
        }
      }
    }
    const int8_t* xk = xq + k * kQB;
    const auto load = [&](int r, int64_t v, int h) __attribute__((always_inline)) {
      const std::byte* at = block + r * panel_stride + 64 * v + 32 * h;
      if constexpr (kPrefetch) {
        if (h == 0) _mm_prefetch(reinterpret_cast<const char*>(at + kAheadBytes), _MM_HINT_T0);
      }
      return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at));
    };
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      // x's broadcasts loaded again for each half: g++ kept the first half's for the second, 24
      // vectors for three rows, and stored them and the products' sums to the stack
      const int8_t* xh = xk;
      asm volatile("" : "+r"(xh));
      __m256i dot[NB][R];
      if constexpr (D == DType::kQ8_0) {
#pragma GCC unroll 8
        for (int b = 0; b < NB; ++b)
#pragma GCC unroll 4
          for (int r = 0; r < R; ++r) dot[b][r] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int64_t v = 0; v < kQB / 4; ++v) {
          __m256i wv[R], magnitude[R];
#pragma GCC unroll 4
          for (int r = 0; r < R; ++r) {
            wv[r] = load(r, v, h);
            magnitude[r] = _mm256_abs_epi8(wv[r]);
          }
#pragma GCC unroll 8
          for (int b = 0; b < NB; ++b) {
            const __m256i xv = x_quad(xh + b * xq_stride, v);
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r) {
              const __m256i pairs = _mm256_maddubs_epi16(magnitude[r], _mm256_sign_epi8(xv, wv[r]));
              dot[b][r] = _mm256_add_epi32(dot[b][r], _mm256_madd_epi16(pairs, ones));
              // each sum in a register as it goes: g++ otherwise reorders the adds of a block,
              // holding every product until the last and storing them to the stack
              asm("" : "+x"(dot[b][r]));
            }
          }
        }
      } else {
        const __m256i nibble = _mm256_set1_epi8(0x0F);
        __m256i pairs[NB][R];
#pragma GCC unroll 8
        for (int b = 0; b < NB; ++b)
#pragma GCC unroll 4
          for (int r = 0; r < R; ++r) pairs[b][r] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int64_t v = 0; v < kQB / 8; ++v) {
          __m256i low[R], high[R];
#pragma GCC unroll 4
          for (int r = 0; r < R; ++r) {
            const __m256i raw = load(r, v, h);
            low[r] = _mm256_and_si256(raw, nibble);
            high[r] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), nibble);
          }
#pragma GCC unroll 8
          for (int b = 0; b < NB; ++b) {
            const int8_t* xb = xh + b * xq_stride;
            const __m256i x_low = x_quad(xb, v), x_high = x_quad(xb, v + 4);
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r) {
              pairs[b][r] = _mm256_add_epi16(pairs[b][r], _mm256_maddubs_epi16(low[r], x_low));
              pairs[b][r] = _mm256_add_epi16(pairs[b][r], _mm256_maddubs_epi16(high[r], x_high));
              asm("" : "+x"(pairs[b][r]));  // as q8_0's sums
            }
          }
        }
#pragma GCC unroll 8
        for (int b = 0; b < NB; ++b) {
          const __m256i start = _mm256_set1_epi32(xbias[b * xs_stride + k]);
#pragma GCC unroll 4
          for (int r = 0; r < R; ++r) {
            dot[b][r] = _mm256_add_epi32(start, _mm256_madd_epi16(pairs[b][r], ones));
          }
        }
      }
      __m256 dw[R];
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const std::byte* at = scales + r * panel_stride + 16 * h;
        dw[r] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at)));
      }
#pragma GCC unroll 8
      for (int b = 0; b < NB; ++b) {
        const __m256 dx = _mm256_set1_ps(xs[b * xs_stride + k]);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          acc[b][r][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[b][r]), _mm256_mul_ps(dw[r], dx),
                                         acc[b][r][h]);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int b = 0; b < NB; ++b)
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) out[b][r][0] = acc[b][r][0], out[b][r][1] = acc[b][r][1];
}

// y for panels [first, last) in walk_panel_tiles's tiles: two panels × up to kPairTileMaxRows rows
// of x, or one panel × up to kTileRows.
template <DType D>
void panel_range(const MatVecParams& p, const int8_t* xq, const float* xs, const int32_t* xbias,
                 int64_t first, int64_t last) {
  const QuantPanelLayout layout(D, p.in);
  const int64_t blocks = layout.blocks;
  const auto* weight = static_cast<const std::byte*>(p.weight);
  const auto tile = [&]<int R, int NB>(int64_t panel, int64_t spread, int64_t b) {
    __m256 acc[NB][R][2];
    const std::byte* w = weight + panel * layout.panel_bytes();
    const int64_t panel_stride = spread * layout.panel_bytes();
    const int8_t* x = xq + b * blocks * kQB;
    if (b == 0) {
      products<D, R, NB, true>(w, panel_stride, layout, x, blocks * kQB, xs + b * blocks,
                               xbias + b * blocks, blocks, acc);
    } else {
      products<D, R, NB, false>(w, panel_stride, layout, x, blocks * kQB, xs + b * blocks,
                                xbias + b * blocks, blocks, acc);
    }
    write_tile<R, NB>(p, panel, spread, b, acc);
  };
  walk_panel_tiles<kPairTileMaxRows, kTileRows>(p.n, first, last, tile);
}

template <DType D>
void quant_panels(const MatVecParams* params, int64_t count, ThreadPool& pool,
                  MatVecScratch& scratch) {
  const MatVecParams& p = params[0];  // x as every product reads it
  const int64_t blocks = q8_0_blocks(p.in);
  int8_t* xq = scratch.quants.data();          // [n][blocks · 32]
  float* xs = scratch.scales.data();           // [n][blocks]
  int32_t* xbias = scratch.block_bias.data();  // [n][blocks] (q4_0)
  // x's rows rounded to q8_0 by the tasks themselves
  RowsInTheJob quantizing(p.n, pool.size());
  const int64_t x_stride = p.x_stride > 0 ? p.x_stride : p.in;
  const auto quantize_row = [&](int64_t b) {
    int8_t* row = xq + b * blocks * kQB;
    quantize_q8_0_row(p.x + b * x_stride, p.in, row, xs + b * blocks);
    // q4_0: the nibbles are the weights + 8
    if constexpr (D == DType::kQ4_0) block_corrections(row, blocks, 8, xbias + b * blocks);
  };
  for_each_panel_task(params, count, pool, p.n >= 2,
                      [&](const MatVecParams& product, int64_t first, int64_t last) {
                        quantizing.ready(quantize_row);
                        panel_range<D>(product, xq, xs, xbias, first, last);
                      });
}

}  // namespace

void matvec_avx2_quant_panels(const MatVecParams& p, ThreadPool& pool, MatVecScratch& scratch) {
  matvec_avx2_quant_panels(&p, 1, pool, scratch);
}

void matvec_avx2_quant_panels(const MatVecParams* params, int64_t count, ThreadPool& pool,
                              MatVecScratch& scratch) {
  require_shared_quant_panels(params, count, "matvec_avx2_quant_panels");
  const MatVecParams& p = params[0];
  if (p.n == 0) return;
  reserve_matvec_scratch(p, scratch);
  p.weight_dtype == DType::kQ8_0 ? quant_panels<DType::kQ8_0>(params, count, pool, scratch)
                                 : quant_panels<DType::kQ4_0>(params, count, pool, scratch);
}

}  // namespace kvlab
