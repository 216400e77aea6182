// Built with AVX-512 F/BW/VL/DQ + BF16 + AMX (tile, bf16); reached only through FastDecoder where
// the CPU has AMX (and the kernel the tile permission) and bf16 weights are stored in panels.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/amx_tiles.h"
#include "kernels/bf16_rows.h"
#include "kernels/matvec.h"

namespace kvlab {
namespace {

#include "kernels/matvec_amx_bf16_tiles.inc"

// How far ahead of the chunk it multiplies the first pass over a pair of panels prefetches each
// of them into L1 (the tiles' loads wait on memory otherwise): 4 KiB a panel. Measured on the
// Emerald Rapids VM at 32 and 64 rows of x, 1.2x the rate without prefetches; 2 chunks the same,
// 8 slower, prefetches into L2 (every other line, or 16 chunks ahead on top) slower
// (docs/kernels/dense-decode.md).
constexpr int64_t kAheadChunks = 4;

// Where one pass is all (up to 32 rows of x: no second pass brings the next pair into L2), the
// first pass also prefetches each panel 16 KiB further into L2: the step at 2-32 rows 1.04x
// faster in four A/B runs (0.98-1.09; docs/kernels/dense-decode.md).
constexpr int64_t kFurtherBytes = 16384;

// The first pass over NP panels at `w` (`stride` elements apart), before chunk c of `chunks`: the
// panels' chunk kAheadChunks ahead into L1 (and, `further`, kFurtherBytes past it into L2).
template <int NP>
inline __attribute__((always_inline)) void prefetch_ahead(const uint16_t* w, int64_t stride,
                                                          int64_t c, int64_t chunks, bool further) {
  if (c + kAheadChunks >= chunks) return;
  const auto* ahead = reinterpret_cast<const char*>(w + (c + kAheadChunks) * kChunkPanelElements);
#pragma GCC unroll 16
  for (int line = 0; line < 16; ++line) {
    _mm_prefetch(ahead + 64 * line, _MM_HINT_T0);
    if constexpr (NP == 2) _mm_prefetch(ahead + 2 * stride + 64 * line, _MM_HINT_T0);
  }
  if (!further) return;
#pragma GCC unroll 16
  for (int line = 0; line < 16; ++line) {
    _mm_prefetch(ahead + kFurtherBytes + 64 * line, _MM_HINT_T1);
    if constexpr (NP == 2)
      _mm_prefetch(ahead + kFurtherBytes + 2 * stride + 64 * line, _MM_HINT_T1);
  }
}

// The second pass, before chunk c: chunk c of the next pair of panels into L2.
inline __attribute__((always_inline)) void prefetch_next_pair(const uint16_t* next_pair,
                                                              int64_t stride, int64_t c) {
  const auto* next = reinterpret_cast<const char*>(next_pair + c * kChunkPanelElements);
#pragma GCC unroll 16
  for (int line = 0; line < 16; ++line) {
    _mm_prefetch(next + 64 * line, _MM_HINT_T1);
    _mm_prefetch(next + 2 * stride + 64 * line, _MM_HINT_T1);
  }
}

// y for panels [first, last): two panels at a time, each pair against every block of x in twos;
// the first pair of x blocks reads the panels from memory (and prefetches ahead), the rest from
// cache.
void panel_range(const MatVecParams& p, const uint16_t* x, int64_t xs, int64_t first,
                 int64_t last) {
  const AmxTileConfig config = full_tiles_config(8);
  alignas(64) float sums[kTileRowsX * kPanelRows];
  _tile_loadconfig(&config);
  const int64_t stride = bf16_panel_elements(p.in);
  const int64_t chunks = bf16_row_stride(p.in) / kChunkElements;
  const auto* weight = static_cast<const uint16_t*>(p.weight);
  const bool one_pass = p.n <= 2 * kTileRowsX;
  walk_panel_pairs(p, first, last, [&]<int NX, int NP>(int64_t panel, int64_t blk) {
    const uint16_t* w = weight + panel * stride;
    const int64_t b = blk * kTileRowsX;
    if (blk == 0) {
      tile_block<NX, NP>(
          p, w, x, xs, panel, b, sums, [&](int64_t c) __attribute__((always_inline)) {
            prefetch_ahead<NP>(w, stride, c, chunks, one_pass);
          });
    } else if (blk == 2 && panel + 4 <= last) {
      // The second pass over a pair of panels (x's blocks 2 and 3) finds them in L2 and would
      // leave the memory idle: it brings the next pair into L2, a chunk of each per multiply, for
      // the next first pass to find there (docs/kernels/dense-decode.md measured it at 64 rows of
      // x).
      const uint16_t* next_pair = w + 2 * stride;
      tile_block<NX, NP>(
          p, w, x, xs, panel, b, sums, [&](int64_t c) __attribute__((always_inline)) {
            prefetch_next_pair(next_pair, stride, c);
          });
    } else {
      tile_block<NX, NP>(p, w, x, xs, panel, b, sums, [](int64_t) {});
    }
  });
  _tile_release();
}

}  // namespace

void matvec_amx_bf16_panels(const MatVecParams& p, ThreadPool& pool, MatVecScratch& scratch) {
  matvec_amx_bf16_panels(&p, 1, pool, scratch);
}

void matvec_amx_bf16_panels(const MatVecParams* params, int64_t count, ThreadPool& pool,
                            MatVecScratch& scratch) {
  require_shared_bf16_panels(params, count, "matvec_amx_bf16_panels");
  const MatVecParams& p = params[0];  // x as every product reads it
  if (p.n == 0) return;
  const int64_t xs = round_tile_rows(p, scratch, pool);
  const uint16_t* x = scratch.bf16.data();
  const ProductPanels products(params, count);
  for_each_task(pool, products.total(), panels_per_task(p, products.total(), pool), 2,
                [&](int64_t first, int64_t last) {
                  products.split(first, last, [&](int64_t i, int64_t from, int64_t to) {
                    panel_range(params[i], x, xs, from, to);
                  });
                });
}

}  // namespace kvlab
