// Built with AVX-512 F/BW/VL/DQ + VNNI + AMX (tile, int8); reached only through FastDecoder where
// the CPU has AMX int8 (and the kernel the tile permission) and q8_0 weights are stored in panels.
#include <immintrin.h>

#include <algorithm>
#include <cmath>  // NAN in q8_0_blocks.inc
#include <cstring>

#include "kernels/amx_tiles.h"
#include "kernels/matvec.h"

namespace kvlab {
namespace {

#include "kernels/matvec_common.inc"
#include "kernels/matvec_q8_0_x.inc"

// A tile multiply (tdpbssd) takes one block of 32 inputs: 16 rows of x × 32 int8 (the A tile,
// 512 bytes) against the same inputs of a panel's 16 rows (the B tile: 8 rows of 16 outputs × 4
// inputs, the panel's 512 bytes of that block as they lie) into 16 × 16 int32 sums — exact, and
// each block's own, since every block has its own scales d_w and d_x.
constexpr int64_t kTileRowsX = kPanelRows;
constexpr int64_t kXTileBytes = kTileRowsX * kQB;  // 512

// Six tiles: sums in tmm0, 1 (blocks k and k + 1 of a pair), x in tmm2, 3, the panel in tmm4, 5.
AmxTileConfig q8_0_tiles_config() {
  AmxTileConfig c = full_tiles_config(2);  // sums: 16 rows of x × 16 int32
  set_q8_0_block_operands(c, 2, 4);
  set_q8_0_block_operands(c, 3, 5);
  return c;
}

// How far ahead of the block it multiplies the first pass over a panel prefetches the panel's
// quants into L1: 8 blocks (4 KiB), as the bf16 tiles' kAheadChunks.
constexpr int64_t kAheadBlocks = 8;

// acc[m] += block k's sums (stored, [16 rows of x][16 outputs]) · d_w · d_x[m]: an exact integer
// to f32 (|Σ| ≤ 32 · 127 · 128 < 2^24), then one multiply-add a row.
inline __attribute__((always_inline)) void scale_into(const int32_t* sums, __m512 dw,
                                                      const float* dx, __m512 (&acc)[kTileRowsX]) {
#pragma GCC unroll 16
  for (int m = 0; m < kTileRowsX; ++m) {
    const __m512 exact = _mm512_cvtepi32_ps(_mm512_load_si512(sums + m * kPanelRows));
    acc[m] = _mm512_fmadd_ps(exact, _mm512_mul_ps(dw, _mm512_set1_ps(dx[m])), acc[m]);
  }
}

// y_rows [16 rows of x][16 outputs] = one panel times a block of 16 rows of x (its tiles `xq`,
// scales `xs`), every block of inputs: two a pass (both multiplies issued before either's sums
// are stored and scaled).
void panel_times_rows(const std::byte* panel, const std::byte* scales, int64_t blocks,
                      const int8_t* xq, const float* xs, bool prefetch, int32_t* sums,
                      float* y_rows) {
  const auto dw = [&](int64_t k) {
    return _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales + k * kQ8PanelScaleBytes)));
  };
  __m512 acc[kTileRowsX];
#pragma GCC unroll 16
  for (int m = 0; m < kTileRowsX; ++m) acc[m] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 2 <= blocks; k += 2) {
    const std::byte* w = panel + k * kQ8PanelBlockBytes;
    if (prefetch && k + kAheadBlocks < blocks) {
      const auto* ahead = reinterpret_cast<const char*>(w + kAheadBlocks * kQ8PanelBlockBytes);
#pragma GCC unroll 16
      for (int line = 0; line < 16; ++line) _mm_prefetch(ahead + 64 * line, _MM_HINT_T0);
    }
    _tile_zero(0);
    _tile_zero(1);
    _tile_loadd(2, xq + k * kXTileBytes, kQB);
    _tile_loadd(4, w, 64);
    _tile_loadd(3, xq + (k + 1) * kXTileBytes, kQB);
    _tile_loadd(5, w + kQ8PanelBlockBytes, 64);
    _tile_dpbssd(0, 2, 4);
    _tile_dpbssd(1, 3, 5);
    _tile_stored(0, sums, 64);
    scale_into(sums, dw(k), xs + k * kTileRowsX, acc);
    _tile_stored(1, sums + kTileRowsX * kPanelRows, 64);
    scale_into(sums + kTileRowsX * kPanelRows, dw(k + 1), xs + (k + 1) * kTileRowsX, acc);
  }
  if (k < blocks) {
    _tile_zero(0);
    _tile_loadd(2, xq + k * kXTileBytes, kQB);
    _tile_loadd(4, panel + k * kQ8PanelBlockBytes, 64);
    _tile_dpbssd(0, 2, 4);
    _tile_stored(0, sums, 64);
    scale_into(sums, dw(k), xs + k * kTileRowsX, acc);
  }
#pragma GCC unroll 16
  for (int m = 0; m < kTileRowsX; ++m) _mm512_store_ps(y_rows + m * kPanelRows, acc[m]);
}

// y for panels [first, last), each against every block of 16 rows of x in turn; the first block
// of x reads the panel from memory (and prefetches ahead), the rest from cache.
void panel_range(const MatVecParams& p, const int8_t* xq, const float* xs, int64_t first,
                 int64_t last) {
  const AmxTileConfig config = q8_0_tiles_config();
  alignas(64) int32_t sums[2 * kTileRowsX * kPanelRows];
  alignas(64) float y_rows[kTileRowsX * kPanelRows];
  _tile_loadconfig(&config);
  const int64_t blocks = q8_0_blocks(p.in);
  const auto* weight = static_cast<const std::byte*>(p.weight);
  const int64_t ys = p.y_stride > 0 ? p.y_stride : p.out;
  for (int64_t panel = first; panel < last; ++panel) {
    const int64_t o = panel * kPanelRows, outs = std::min(kPanelRows, p.out - o);
    const auto mask = static_cast<__mmask16>((1u << outs) - 1);
    const __m512 bias =
        p.bias != nullptr ? _mm512_maskz_loadu_ps(mask, p.bias + o) : _mm512_setzero_ps();
    for (int64_t b = 0; b < p.n; b += kTileRowsX) {
      const int64_t tile = b / kTileRowsX;
      panel_times_rows(weight + q8_0_panel_quants(p.in, panel),
                       weight + q8_0_panel_scales(p.out, p.in, panel), blocks,
                       xq + tile * blocks * kXTileBytes, xs + tile * blocks * kTileRowsX, b == 0,
                       sums, y_rows);
      for (int64_t m = 0; m < std::min(kTileRowsX, p.n - b); ++m) {
        const __m512 v = _mm512_load_ps(y_rows + m * kPanelRows);
        _mm512_mask_storeu_ps(p.y + (b + m) * ys + o, mask, _mm512_add_ps(v, bias));
      }
    }
  }
  _tile_release();
}

}  // namespace

void matvec_amx_q8_0_panels(const MatVecParams& p, ThreadPool& pool, MatVecScratch& scratch) {
  require_weights(p, "matvec_amx_q8_0_panels", WeightOrder::kPanels, DType::kQ8_0);
  if (p.n == 0) return;
  reserve_matvec_scratch(p, scratch);
  // x as the tiles read it: per block of 16 rows and block k of inputs, the 16 rows' 32 quants
  // (one 512-byte A tile) and their 16 scales; rows past n zero (no sums, scale 0)
  const int64_t blocks = q8_0_blocks(p.in);
  const int64_t padded = (p.n + kTileRowsX - 1) / kTileRowsX * kTileRowsX;
  int8_t* xq = scratch.quants.data();  // [padded / 16][blocks][16][32]
  float* xs = scratch.scales.data();   // [padded / 16][blocks][16]
  const auto tile_at = [&](int64_t b, int64_t k) {
    return (b / kTileRowsX * blocks + k) * kTileRowsX + b % kTileRowsX;  // row b's place in block k
  };
  quantize_rows(p, pool, [&](int64_t b, int64_t k, const int8_t* quants, float scale) {
    std::memcpy(xq + tile_at(b, k) * kQB, quants, kQB);
    xs[tile_at(b, k)] = scale;
  });
  for (int64_t b = p.n; b < padded; ++b) {
    for (int64_t k = 0; k < blocks; ++k) {
      std::memset(xq + tile_at(b, k) * kQB, 0, kQB);
      xs[tile_at(b, k)] = 0.0f;
    }
  }
  const int64_t per_task =
      (rows_per_task(p.in, p.n, p.out, pool.size()) + kPanelRows - 1) / kPanelRows;
  for_each_task(pool, panel_count(p.out), per_task,
                [&](int64_t first, int64_t last) { panel_range(p, xq, xs, first, last); });
}

}  // namespace kvlab
