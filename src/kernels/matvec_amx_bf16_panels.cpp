// Built with AVX-512 F/BW/VL/DQ + BF16 + AMX (tile, bf16); reached only through FastDecoder where
// the CPU has AMX (and the kernel the tile permission) and bf16 weights are stored in panels.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/amx_tiles.h"
#include "kernels/matvec.h"

namespace kvlab {
namespace {

#include "kernels/matvec_amx_bf16_tiles.inc"
#include "kernels/matvec_bf16_rounding.inc"
#include "kernels/matvec_rows.inc"

// How far ahead of the chunk it multiplies the first pass over a pair of panels prefetches each
// of them into L1 (the tiles' loads wait on memory otherwise): 4 KiB a panel. Measured on the
// Emerald Rapids VM at 32 and 64 rows of x, 1.2x the rate without prefetches; 2 chunks the same,
// 8 slower, prefetches into L2 (every other line, or 16 chunks ahead on top) slower
// (docs/kernels/dense-decode.md).
constexpr int64_t kAheadChunks = 4;

// The first pass over NP panels at `w` (`stride` elements apart), before chunk c of `chunks`: the
// panels' chunk kAheadChunks ahead into L1.
template <int NP>
inline __attribute__((always_inline)) void prefetch_ahead(const uint16_t* w, int64_t stride,
                                                          int64_t c, int64_t chunks) {
  if (c + kAheadChunks >= chunks) return;
  const auto* ahead = reinterpret_cast<const char*>(w + (c + kAheadChunks) * kChunkPanelElements);
#pragma GCC unroll 16
  for (int line = 0; line < 16; ++line) {
    _mm_prefetch(ahead + 64 * line, _MM_HINT_T0);
    if constexpr (NP == 2) _mm_prefetch(ahead + 2 * stride + 64 * line, _MM_HINT_T0);
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
  const int64_t blocks = (p.n + kTileRowsX - 1) / kTileRowsX;
  const auto row_blocks = [&]<int NP>(int64_t panel) {
    // The second pass over a pair of panels (x's blocks 2 and 3) finds them in L2 and would leave
    // the memory idle: it brings the next pair into L2, a chunk of each per multiply, for the next
    // first pass to find there (docs/kernels/dense-decode.md measured it at 64 rows of x).
    const uint16_t* next_pair = panel + 4 <= last ? static_cast<const uint16_t*>(p.weight) +
                                                        (panel + 2) * bf16_panel_elements(p.in)
                                                  : nullptr;
    const int64_t stride = bf16_panel_elements(p.in);
    const int64_t chunks = bf16_row_stride(p.in) / kChunkElements;
    const uint16_t* w = static_cast<const uint16_t*>(p.weight) + panel * stride;
    const auto pass = [&]<int NX>(int64_t blk) {
      const int64_t b = blk * kTileRowsX;
      if (blk == 0) {
        tile_block<NX, NP>(
            p, w, x, xs, panel, b, sums, [&](int64_t c) __attribute__((always_inline)) {
              prefetch_ahead<NP>(w, stride, c, chunks);
            });
      } else if (blk == 2 && next_pair != nullptr) {
        tile_block<NX, NP>(
            p, w, x, xs, panel, b, sums, [&](int64_t c) __attribute__((always_inline)) {
              prefetch_next_pair(next_pair, stride, c);
            });
      } else {
        tile_block<NX, NP>(p, w, x, xs, panel, b, sums, [](int64_t) {});
      }
    };
    int64_t blk = 0;
    for (; blk + 2 <= blocks; blk += 2) pass.template operator()<2>(blk);
    if (blk < blocks) pass.template operator()<1>(blk);
  };
  int64_t panel = first;
  for (; panel + 2 <= last; panel += 2) row_blocks.template operator()<2>(panel);
  if (panel < last) row_blocks.template operator()<1>(panel);
  _tile_release();
}

}  // namespace

void matvec_amx_bf16_panels(const MatVecParams& p, ThreadPool& pool, MatVecScratch& scratch) {
  require_weights(p, "matvec_amx_bf16_panels", WeightOrder::kPanels, DType::kBf16);
  if (p.n == 0) return;
  reserve_matvec_scratch(p, scratch);
  // each row of x an odd number of cache lines past the last (the scratch starts on one), so the 32
  // rows a pass loads lie in 32 sets of L1 and every tile row is one line: the tiles re-read x once
  // per pair of panels
  const int64_t xs = bf16_tile_row_stride(p.in);
  round_rows(p, scratch.bf16.data(), xs, pool);
  // the last block of x's rows padded with zero rows (the scratch holds whole blocks)
  const int64_t padded = (p.n + kTileRowsX - 1) / kTileRowsX * kTileRowsX;
  std::memset(scratch.bf16.data() + p.n * xs, 0,
              static_cast<size_t>((padded - p.n) * xs) * sizeof(uint16_t));
  const int64_t panels = panel_count(p.out);
  int64_t per_task = (rows_per_task(p.in, p.n, p.out, pool.size()) + kPanelRows - 1) / kPanelRows;
  per_task = (per_task + 1) / 2 * 2;  // whole pairs of panels
  const uint16_t* x = scratch.bf16.data();
  for_each_task(pool, panels, per_task,
                [&](int64_t first, int64_t last) { panel_range(p, x, xs, first, last); });
}

}  // namespace kvlab
