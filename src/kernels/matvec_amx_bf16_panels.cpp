// Built with AVX-512 F/BW/VL/DQ + BF16 + AMX (tile, bf16); reached only through FastDecoder where
// the CPU has AMX (and the kernel the tile permission) and bf16 weights are stored in panels.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/amx_tiles.h"
#include "kernels/matvec.h"

namespace kvlab {
namespace {

#include "kernels/matvec_bf16_rounding.inc"
#include "kernels/matvec_rows.inc"

// A tile multiply (tdpbf16ps) takes 16 rows of x × 32 input elements (the A tile) against the
// same 32 elements of one panel's 16 output rows (the B tile: a panel's 16 pairs of inputs, 64
// bytes each, are one contiguous KiB in exactly the order the tile wants) into 16 × 16 f32 sums.
constexpr int64_t kTileRowsX = kBf16TileRows;
constexpr int64_t kChunkElements = kBf16RowChunk;                     // 32 inputs a tile multiply
constexpr int64_t kChunkPanelElements = kChunkElements * kPanelRows;  // 512 bf16: one B tile

// Eight tiles (full_tiles_config(8)): sums C[i][j] in tmm0..3 (x block i, panel j: tmm 2i + j), x
// blocks in tmm4, 5, panels in tmm6, 7.

// How far ahead of the chunk it multiplies the first pass over a pair of panels prefetches each
// of them into L1 (the tiles' loads wait on memory otherwise): 4 KiB a panel. Measured on the
// Emerald Rapids VM at 32 and 64 rows of x, 1.2x the rate without prefetches; 2 chunks the same,
// 8 slower, prefetches into L2 (every other line, or 16 chunks ahead on top) slower
// (docs/kernels/dense-decode.md).
constexpr int64_t kAheadChunks = 4;

// A tile of sums (stored to `sums`, [16 rows of x][16 outputs]) -> y rows b.. (the valid ones),
// the outputs of `panel`, + bias.
inline __attribute__((always_inline)) void write_sums(const MatVecParams& p, int64_t panel,
                                                      int64_t b, const float* sums) {
  const int64_t ys = p.y_stride > 0 ? p.y_stride : p.out;
  const int64_t o = panel * kPanelRows, outs = std::min(kPanelRows, p.out - o);
  const auto mask = static_cast<__mmask16>((1u << outs) - 1);
  const __m512 bias =
      p.bias != nullptr ? _mm512_maskz_loadu_ps(mask, p.bias + o) : _mm512_setzero_ps();
  const int64_t rows = std::min(kTileRowsX, p.n - b);
  for (int64_t m = 0; m < rows; ++m) {
    const __m512 v = _mm512_load_ps(sums + m * kPanelRows);
    _mm512_mask_storeu_ps(p.y + (b + m) * ys + o, mask, _mm512_add_ps(v, bias));
  }
}

// y for NX blocks of 16 rows of x from row b and NP panels from `panel`, over every chunk of
// the inputs. x's rows are rounded to bf16, xs elements apart, padded with zeros to whole chunks
// and whole blocks of rows; the panels are padded to whole chunks too (pack_bf16_panels).
// `prefetch`: the first pass over the panels (into L1, kAheadChunks ahead); `next_pair`: the
// next pair of panels, brought into L2 (nullptr: none).
template <int NX, int NP>
inline __attribute__((always_inline)) void tile_block(const MatVecParams& p, const uint16_t* x,
                                                      int64_t xs, int64_t panel, int64_t b,
                                                      bool prefetch, const uint16_t* next_pair,
                                                      float* sums) {
  const int64_t chunks = bf16_row_stride(p.in) / kChunkElements;
  const int64_t stride = bf16_panel_elements(p.in);
  const uint16_t* w = static_cast<const uint16_t*>(p.weight) + panel * stride;
  const uint16_t* x0 = x + b * xs;
  const int64_t x_bytes = xs * static_cast<int64_t>(sizeof(uint16_t));
  _tile_zero(0);
  if constexpr (NP == 2) _tile_zero(1);
  if constexpr (NX == 2) _tile_zero(2);
  if constexpr (NX == 2 && NP == 2) _tile_zero(3);
  for (int64_t c = 0; c < chunks; ++c) {
    const uint16_t* wc = w + c * kChunkPanelElements;
    if (prefetch && c + kAheadChunks < chunks) {
      const auto* ahead = reinterpret_cast<const char*>(wc + kAheadChunks * kChunkPanelElements);
#pragma GCC unroll 16
      for (int line = 0; line < 16; ++line) {
        _mm_prefetch(ahead + 64 * line, _MM_HINT_T0);
        if constexpr (NP == 2) _mm_prefetch(ahead + 2 * stride + 64 * line, _MM_HINT_T0);
      }
    }
    if (next_pair != nullptr) {
      const auto* next = reinterpret_cast<const char*>(next_pair + c * kChunkPanelElements);
#pragma GCC unroll 16
      for (int line = 0; line < 16; ++line) {
        _mm_prefetch(next + 64 * line, _MM_HINT_T1);
        _mm_prefetch(next + 2 * stride + 64 * line, _MM_HINT_T1);
      }
    }
    // the loads first, then the multiplies: in the tile loop alone (from L1) 1.0–1.3× the rate
    // of loads between the multiplies
    _tile_loadd(4, x0 + c * kChunkElements, x_bytes);
    _tile_loadd(6, wc, 64);
    if constexpr (NP == 2) _tile_loadd(7, wc + stride, 64);
    if constexpr (NX == 2) _tile_loadd(5, x0 + kTileRowsX * xs + c * kChunkElements, x_bytes);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (NP == 2) _tile_dpbf16ps(1, 4, 7);
    if constexpr (NX == 2) _tile_dpbf16ps(2, 5, 6);
    if constexpr (NX == 2 && NP == 2) _tile_dpbf16ps(3, 5, 7);
  }
  // (the tile number of _tile_stored is an immediate: one statement per tile)
  constexpr int64_t kSumsBytes = kPanelRows * sizeof(float);
  _tile_stored(0, sums, kSumsBytes);
  write_sums(p, panel, b, sums);
  if constexpr (NP == 2) {
    _tile_stored(1, sums, kSumsBytes);
    write_sums(p, panel + 1, b, sums);
  }
  if constexpr (NX == 2) {
    _tile_stored(2, sums, kSumsBytes);
    write_sums(p, panel, b + kTileRowsX, sums);
  }
  if constexpr (NX == 2 && NP == 2) {
    _tile_stored(3, sums, kSumsBytes);
    write_sums(p, panel + 1, b + kTileRowsX, sums);
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
    int64_t blk = 0;
    for (; blk + 2 <= blocks; blk += 2) {
      tile_block<2, NP>(p, x, xs, panel, blk * kTileRowsX, blk == 0, blk == 2 ? next_pair : nullptr,
                        sums);
    }
    if (blk < blocks) {
      tile_block<1, NP>(p, x, xs, panel, blk * kTileRowsX, blk == 0, blk == 2 ? next_pair : nullptr,
                        sums);
    }
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
