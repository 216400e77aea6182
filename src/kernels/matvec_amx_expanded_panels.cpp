// Built with AVX-512 F/BW/VL/DQ + BF16 + AMX (tile, bf16); reached only through FastDecoder where
// the CPU has AMX (and the kernel the tile permission) and q8_0 or q4_0 weights are stored in
// panels, from quant_expand_min_rows rows of x.
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "kernels/amx_tiles.h"
#include "kernels/bf16_rows.h"
#include "kernels/matvec.h"

namespace kvlab {
namespace {

#include "kernels/matvec_amx_bf16_tiles.inc"

// How far ahead of the block it expands a panel's quants are prefetched into L1: 4 KiB, as the
// int8 tiles' kAheadBlocks.
constexpr int64_t kAheadBytes = 4096;

// The scales of a panel's block (16 f16, one an output row) as four vectors, d[g] holding those of
// outputs 4g..4g+3 each four times: the order of a quarter of a q8_0-ordered row.
struct BlockScales {
  __m512 d[4];
  explicit BlockScales(const std::byte* scales) {
    const __m512 all =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales)));
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      const __m512i from = _mm512_setr_epi32(4 * g, 4 * g, 4 * g, 4 * g, 4 * g + 1, 4 * g + 1,
                                             4 * g + 1, 4 * g + 1, 4 * g + 2, 4 * g + 2, 4 * g + 2,
                                             4 * g + 2, 4 * g + 3, 4 * g + 3, 4 * g + 3, 4 * g + 3);
      d[g] = _mm512_permutexvar_ps(from, all);
    }
  }
};

// Row v of a block in the q8_0 panel order (inputs 4v..4v+3 of the 16 outputs, four bytes an
// output; its quarters q[g] hold outputs 4g..4g+3), each quant times its output's scale, rounded
// to bf16 (nearest even) -> the bf16 panel order's rows 2v (inputs 4v, 4v+1 of each output) and
// 2v + 1 (inputs 4v + 2, 4v + 3) at `out`, 64 elements. q · d is exact in f32 (8 × 11 bits).
inline __attribute__((always_inline)) void expand_row(const __m128i (&q)[4], const BlockScales& s,
                                                      uint16_t* out) {
  __m512 scaled[4];
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    scaled[g] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q[g])), s.d[g]);
  }
  // each 64-bit lane: one output's four inputs in bf16; outputs 0..7, then 8..15
  const auto low = std::bit_cast<__m512i>(_mm512_cvtne2ps_pbh(scaled[1], scaled[0]));
  const auto high = std::bit_cast<__m512i>(_mm512_cvtne2ps_pbh(scaled[3], scaled[2]));
  const __m512i first_pair =
      _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i second_pair = _mm512_add_epi32(first_pair, _mm512_set1_epi32(1));
  _mm512_store_si512(out, _mm512_permutex2var_epi32(low, first_pair, high));
  _mm512_store_si512(out + 2 * kPanelRows, _mm512_permutex2var_epi32(low, second_pair, high));
}

// Block k of a panel (32 inputs of its 16 outputs) -> one bf16 B tile (kChunkPanelElements).
inline void expand_q8_0_block(const std::byte* quants, const std::byte* scales, uint16_t* out) {
  const BlockScales s(scales);
#pragma GCC unroll 8
  for (int v = 0; v < 8; ++v) {
    const __m128i q[4] = {_mm_loadu_si128(reinterpret_cast<const __m128i*>(quants + 64 * v)),
                          _mm_loadu_si128(reinterpret_cast<const __m128i*>(quants + 64 * v + 16)),
                          _mm_loadu_si128(reinterpret_cast<const __m128i*>(quants + 64 * v + 32)),
                          _mm_loadu_si128(reinterpret_cast<const __m128i*>(quants + 64 * v + 48))};
    expand_row(q, s, out + 4 * kPanelRows * v);
  }
}

// q4_0: a 64-byte load's low nibbles are row v of the q8_0 order, its high nibbles row v + 4, each
// nibble minus 8.
inline void expand_q4_0_block(const std::byte* quants, const std::byte* scales, uint16_t* out) {
  const BlockScales s(scales);
  const __m512i nibble = _mm512_set1_epi8(0x0F), eight = _mm512_set1_epi8(8);
#pragma GCC unroll 4
  for (int v = 0; v < 4; ++v) {
    const __m512i raw = _mm512_loadu_si512(quants + 64 * v);
    const __m512i low = _mm512_sub_epi8(_mm512_and_si512(raw, nibble), eight);
    const __m512i high =
        _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(raw, 4), nibble), eight);
    const __m128i lq[4] = {_mm512_castsi512_si128(low), _mm512_extracti32x4_epi32(low, 1),
                           _mm512_extracti32x4_epi32(low, 2), _mm512_extracti32x4_epi32(low, 3)};
    const __m128i hq[4] = {_mm512_castsi512_si128(high), _mm512_extracti32x4_epi32(high, 1),
                           _mm512_extracti32x4_epi32(high, 2), _mm512_extracti32x4_epi32(high, 3)};
    expand_row(lq, s, out + 4 * kPanelRows * v);
    expand_row(hq, s, out + 4 * kPanelRows * (v + 4));
  }
}

// Block k of panel `panel` of p's q8_0 or q4_0 weights -> chunk k of its bf16 panel order
// (pack_bf16_panels) at `out`, each weight bf16(q · d); the panel's lines up to the next block's
// quants (the scales' too) 4 KiB ahead into L1 (past the panel's end: the next panel's, which
// follows it).
inline __attribute__((always_inline)) void expand_block(const MatVecParams& p, int64_t panel,
                                                        int64_t k, uint16_t* out) {
  const DType dtype = p.weight_dtype;
  const QuantPanelLayout layout(dtype, p.in);
  const std::byte* start = static_cast<const std::byte*>(p.weight) + panel * layout.panel_bytes();
  const std::byte* block = start + layout.quants(k);
  const std::byte* scales = start + layout.scales(k);
  for (int64_t line = 0; line < layout.span(k); line += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(block + kAheadBytes + line), _MM_HINT_T0);
  }
  dtype == DType::kQ8_0 ? expand_q8_0_block(block, scales, out)
                        : expand_q4_0_block(block, scales, out);
}

// y for panels [first, last), two at a time: the first pass over a pair (x's first two blocks of
// rows) expands each chunk of both panels into `expanded` (two panels' room) just before its tiles
// load it, the later passes read the expanded pair from cache.
void expanded_range(const MatVecParams& p, const uint16_t* x, int64_t xs, int64_t first,
                    int64_t last, uint16_t* expanded) {
  const AmxTileConfig config = full_tiles_config(8);
  alignas(64) float sums[kTileRowsX * kPanelRows];
  _tile_loadconfig(&config);
  const int64_t stride = bf16_panel_elements(p.in);
  walk_panel_pairs(p, first, last, [&]<int NX, int NP>(int64_t panel, int64_t blk) {
    const int64_t b = blk * kTileRowsX;
    if (blk == 0) {
      tile_block<NX, NP>(
          p, expanded, x, xs, panel, b, sums, [&](int64_t c) __attribute__((always_inline)) {
            for (int j = 0; j < NP; ++j) {
              expand_block(p, panel + j, c, expanded + j * stride + c * kChunkPanelElements);
            }
          });
    } else {
      tile_block<NX, NP>(p, expanded, x, xs, panel, b, sums, [](int64_t) {});
    }
  });
  _tile_release();
}

}  // namespace

void matvec_amx_expanded_panels(const MatVecParams& p, ThreadPool& pool, MatVecScratch& scratch) {
  matvec_amx_expanded_panels(&p, 1, pool, scratch);
}

void matvec_amx_expanded_panels(const MatVecParams* params, int64_t count, ThreadPool& pool,
                                MatVecScratch& scratch) {
  require_shared_quant_panels(params, count, "matvec_amx_expanded_panels");
  const MatVecParams& p = params[0];  // x as every product reads it
  if (p.n == 0) return;
  const int64_t xs = round_tile_rows(p, scratch, pool);
  const ProductPanels products(params, count);
  const int64_t panels = products.total();
  const int64_t per_task = panels_per_task(p, panels, pool);
  const int64_t tasks = (panels + per_task - 1) / per_task;
  // each task its own room for a pair of expanded panels
  const int64_t pair_elements = 2 * bf16_panel_elements(p.in);
  uint16_t* expanded = reserve_expanded_panels(scratch, tasks * pair_elements);
  const uint16_t* x = scratch.bf16.data();
  // tasks of per_task alike, each numbered for its room
  pool.parallel_for(tasks, [&](int64_t task) {
    const int64_t first = task * per_task;
    products.split(first, std::min(panels, first + per_task),
                   [&](int64_t i, int64_t from, int64_t to) {
                     expanded_range(params[i], x, xs, from, to, expanded + task * pair_elements);
                   });
  });
}

}  // namespace kvlab
