// Built with AVX-512 F/BW/VL/DQ + VNNI + AMX (tile, int8); reached only through FastDecoder where
// the CPU has AMX int8 (and the kernel the tile permission) and q8_0 or q4_0 weights are stored in
// panels.
#include <immintrin.h>

#include <algorithm>
#include <cmath>  // NAN in q8_0_blocks.inc
#include <cstring>

#include "kernels/amx_tiles.h"
#include "kernels/matvec.h"
#include "kernels/q8_0_rows.h"

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

// Eight tiles: two sets of sums, tmm0, 1 and tmm6, 7; x in tmm2, 3; the panel in tmm4, 5. One
// block of 16 rows of x takes a pair of blocks of inputs a set (x's two blocks in tmm2, 3, the
// panel's in tmm4, 5); two blocks of rows take one block of inputs a set (x's in tmm2, 3, the
// panel's in tmm4).
AmxTileConfig q8_0_tiles_config() {
  AmxTileConfig c = full_tiles_config(2);  // sums: 16 rows of x × 16 int32
  c.rows[6] = c.rows[7] = c.rows[0];
  c.colsb[6] = c.colsb[7] = c.colsb[0];
  set_q8_0_block_operands(c, 2, 4);
  set_q8_0_block_operands(c, 3, 5);
  return c;
}

// How far ahead of the block it multiplies the first pass over a panel prefetches the panel's
// quants into L1: 8 blocks (4 KiB), as the bf16 tiles' kAheadChunks; its last 8 blocks prefetch
// the next panel's first (stopping at the panel's end left every panel's first 4 KiB to the
// hardware: 2-6% slower at 8 and 16 rows of x, docs/kernels/dense-decode.md).
constexpr int64_t kAheadBlocks = 8;
constexpr int64_t kAheadBytes = kAheadBlocks * kQ8PanelBlockBytes;
// and 16 KiB ahead into L2: the L1 prefetches alone left the step at 2-48 rows of x 1.06-1.14x
// slower (16 and 12 KiB measured alike, 8 and 28 KiB less; docs/kernels/dense-decode.md)
constexpr int64_t kAheadL2Bytes = 16384;

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

// kLines lines of a panel from `wk` on, kAheadBytes past into L1 and kAheadL2Bytes past into L2
// (past the panel's end: the next panel's, which follows it).
template <int kLines>
inline __attribute__((always_inline)) void prefetch_ahead(const std::byte* wk) {
  const auto* ahead = reinterpret_cast<const char*>(wk + kAheadBytes);
#pragma GCC unroll 16
  for (int line = 0; line < kLines; ++line) _mm_prefetch(ahead + 64 * line, _MM_HINT_T0);
  const auto* further = reinterpret_cast<const char*>(wk + kAheadL2Bytes);
#pragma GCC unroll 16
  for (int line = 0; line < kLines; ++line) _mm_prefetch(further + 64 * line, _MM_HINT_T1);
}

// Sums set kSet (tmm0, 1 or tmm6, 7) = x0 · w0 and x1 · w1 (kOnePanelBlock: x1 · w0): x's tiles
// into tmm2, 3, the panel's blocks into tmm4 (and tmm5). (The tile intrinsics paste their tile
// numbers into the instruction: literals only.)
template <int kSet, bool kOnePanelBlock>
inline __attribute__((always_inline)) void multiply_into_set(const int8_t* x0, const int8_t* x1,
                                                             const std::byte* w0,
                                                             const std::byte* w1) {
  if constexpr (kSet == 0) {
    _tile_zero(0);
    _tile_zero(1);
  } else {
    _tile_zero(6);
    _tile_zero(7);
  }
  _tile_loadd(2, x0, kQB);
  if constexpr (kOnePanelBlock) {
    _tile_loadd(3, x1, kQB);
    _tile_loadd(4, w0, 64);
  } else {
    _tile_loadd(4, w0, 64);
    _tile_loadd(3, x1, kQB);
    _tile_loadd(5, w1, 64);
  }
  if constexpr (kSet == 0) {
    _tile_dpbssd(0, 2, 4);
  } else {
    _tile_dpbssd(6, 2, 4);
  }
  if constexpr (kSet == 0 && kOnePanelBlock) {
    _tile_dpbssd(1, 3, 4);
  } else if constexpr (kSet == 0) {
    _tile_dpbssd(1, 3, 5);
  } else if constexpr (kOnePanelBlock) {
    _tile_dpbssd(7, 3, 4);
  } else {
    _tile_dpbssd(7, 3, 5);
  }
}

// Where blocks_times_rows and blocks_times_two_row_blocks find block k's quants (in the q8_0
// order, 512 bytes) and scales, and what they prefetch: a q8_0 panel's own (QuantPanelLayout), its
// lines from the first pass over it.
struct PanelBlocks {
  const std::byte* panel;
  QuantPanelLayout layout;
  const std::byte* quants(int64_t k) const { return panel + layout.quants(k); }
  const std::byte* scales(int64_t k) const { return panel + layout.scales(k); }
  // blocks k and k + 1 (k even): their quants and scales, one run of 17 lines
  void prefetch_pair(int64_t k) const {
    constexpr QuantPanelLayout kTwoBlocks(DType::kQ8_0, 2 * kQuantBlockElements);
    prefetch_ahead<kTwoBlocks.pair_bytes() / 64>(quants(k));
  }
  // block k: its quants, and the line of scales that closes a pair
  void prefetch_block(int64_t k) const {
    prefetch_ahead<kQ8PanelBlockBytes / 64>(quants(k));
    if (layout.ends_pair(k)) prefetch_ahead<1>(scales(k));
  }
};

// Blocks k and k + 1 (k even, k + 1 < blocks) of a block of 16 rows of x (its tiles from xk) times
// the panel's into sums set kSet.
template <int kSet, class Blocks>
inline __attribute__((always_inline)) void multiply_pair(const Blocks& w, int64_t k,
                                                         const int8_t* xk, bool prefetch) {
  if (prefetch) w.prefetch_pair(k);
  multiply_into_set<kSet, false>(xk, xk + kXTileBytes, w.quants(k), w.quants(k + 1));
}

// Sums set kSet -> `sums` ([2][16 rows of x][16 outputs]).
template <int kSet>
inline __attribute__((always_inline)) void store_pair(int32_t* sums) {
  int32_t* second = sums + kTileRowsX * kPanelRows;
  if constexpr (kSet == 0) {
    _tile_stored(0, sums, 64);
    _tile_stored(1, second, 64);
  } else {
    _tile_stored(6, sums, 64);
    _tile_stored(7, second, 64);
  }
}

// acc [16 rows of x][16 outputs] += `blocks` blocks of inputs of one panel (where `w` says) times a
// block of 16 rows of x (its tiles `xq`, scales `xs`), two blocks a pair. The pairs alternate
// between two sets of sums tiles so that the tiles multiply the next pair while the vector units
// scale this one's stored sums: in the loop alone (operands in cache) 1.2-1.3x the rate of storing
// and scaling each pair before the next one's multiplies (docs/kernels/dense-decode.md).
template <class Blocks>
inline __attribute__((always_inline)) void blocks_times_rows(const Blocks& w, int64_t blocks,
                                                             const int8_t* xq, const float* xs,
                                                             bool prefetch, int32_t* sums,
                                                             __m512 (&acc_out)[kTileRowsX]) {
  // a copy the compiler keeps in registers: acc_out's address leaves the caller, and __m512 may
  // alias the tile stores' int32 sums, so every scaling reloaded and stored acc_out (the step at
  // 8-48 rows of x 1.04-1.08x faster with the copy: docs/kernels/dense-decode.md)
  __m512 acc[kTileRowsX];
#pragma GCC unroll 16
  for (int m = 0; m < kTileRowsX; ++m) acc[m] = acc_out[m];
  const auto dw = [&](int64_t k) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.scales(k))));
  };
  const auto scale_pair = [&](int64_t k) __attribute__((always_inline)) {
    scale_into(sums, dw(k), xs + k * kTileRowsX, acc);
    scale_into(sums + kTileRowsX * kPanelRows, dw(k + 1), xs + (k + 1) * kTileRowsX, acc);
  };
  const auto pair_at = [&]<int kSet>(int64_t k) __attribute__((always_inline)) {
    multiply_pair<kSet>(w, k, xq + k * kXTileBytes, prefetch);
  };
  const int64_t pairs = blocks / 2;
  if (pairs > 0) pair_at.template operator()<0>(0);
  // pair j's multiplies are issued (set j % 2); issue pair j + 1's into the other set, then store
  // and scale pair j
  for (int64_t j = 0; j < pairs; j += 2) {
    if (j + 1 < pairs) pair_at.template operator()<1>(2 * (j + 1));
    store_pair<0>(sums);
    scale_pair(2 * j);
    if (j + 1 >= pairs) break;
    if (j + 2 < pairs) pair_at.template operator()<0>(2 * (j + 2));
    store_pair<1>(sums);
    scale_pair(2 * (j + 1));
  }
  if (blocks % 2 == 1) {
    const int64_t k = blocks - 1;
    _tile_zero(0);
    _tile_loadd(2, xq + k * kXTileBytes, kQB);
    _tile_loadd(4, w.quants(k), 64);
    _tile_dpbssd(0, 2, 4);
    _tile_stored(0, sums, 64);
    scale_into(sums, dw(k), xs + k * kTileRowsX, acc);
  }
#pragma GCC unroll 16
  for (int m = 0; m < kTileRowsX; ++m) acc_out[m] = acc[m];
}

// Block k of the panel times block k of two blocks of 16 rows of x (their tiles at xk0, xk1) into
// sums set kSet, the first block's sums in its first tile: the panel's tile is loaded once for
// both.
template <int kSet>
inline __attribute__((always_inline)) void multiply_block_by_two(const PanelBlocks& w, int64_t k,
                                                                 const int8_t* xk0,
                                                                 const int8_t* xk1, bool prefetch) {
  if (prefetch) w.prefetch_block(k);
  multiply_into_set<kSet, true>(xk0, xk1, w.quants(k), nullptr);
}

// blocks_times_rows for two blocks of 16 rows of x at once (tiles xq0, xq1; scales xs0, xs1; sums
// into acc0_out, acc1_out): each block of the panel is loaded into a tile once for both, so the
// panel streams from memory in one pass instead of two. Block by block, alternating between the
// two sets of sums tiles as blocks_times_rows alternates its pairs; each sum gets the blocks in the
// same order as there, so the results are the same bit for bit.
inline __attribute__((always_inline)) void blocks_times_two_row_blocks(
    const PanelBlocks& w, int64_t blocks, const int8_t* xq0, const float* xs0, const int8_t* xq1,
    const float* xs1, bool prefetch, int32_t* sums, __m512 (&acc0_out)[kTileRowsX],
    __m512 (&acc1_out)[kTileRowsX]) {
  __m512 acc0[kTileRowsX], acc1[kTileRowsX];  // copies, as in blocks_times_rows
#pragma GCC unroll 16
  for (int m = 0; m < kTileRowsX; ++m) {
    acc0[m] = acc0_out[m];
    acc1[m] = acc1_out[m];
  }
  const auto block_at = [&]<int kSet>(int64_t k) __attribute__((always_inline)) {
    multiply_block_by_two<kSet>(w, k, xq0 + k * kXTileBytes, xq1 + k * kXTileBytes, prefetch);
  };
  const auto scale_block = [&](int64_t k) __attribute__((always_inline)) {
    const __m512 dw =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.scales(k))));
    scale_into(sums, dw, xs0 + k * kTileRowsX, acc0);
    scale_into(sums + kTileRowsX * kPanelRows, dw, xs1 + k * kTileRowsX, acc1);
  };
  block_at.template operator()<0>(0);
  for (int64_t k = 0; k < blocks; k += 2) {
    if (k + 1 < blocks) block_at.template operator()<1>(k + 1);
    store_pair<0>(sums);
    scale_block(k);
    if (k + 1 >= blocks) break;
    if (k + 2 < blocks) block_at.template operator()<0>(k + 2);
    store_pair<1>(sums);
    scale_block(k + 1);
  }
#pragma GCC unroll 16
  for (int m = 0; m < kTileRowsX; ++m) {
    acc0_out[m] = acc0[m];
    acc1_out[m] = acc1[m];
  }
}

// What each panel task shares: the weights, x as the tiles read it, and where y's rows are.
struct PanelWork {
  const MatVecParams& p;
  const int8_t* xq;  // [padded rows / 16][blocks][16][32]
  const float* xs;   // [padded rows / 16][blocks][16]
  int64_t blocks;
  int64_t ys;
  const int8_t* x_tile(int64_t b) const { return xq + b / kTileRowsX * blocks * kXTileBytes; }
  const float* x_scales(int64_t b) const { return xs + b / kTileRowsX * blocks * kTileRowsX; }
  // rows b.. of x (at most 16, the valid ones) into y's 16 outputs from o (`mask` of them)
  void store(int64_t b, int64_t o, __mmask16 mask, __m512 bias,
             const __m512 (&acc)[kTileRowsX]) const {
    for (int64_t m = 0; m < std::min(kTileRowsX, p.n - b); ++m) {
      _mm512_mask_storeu_ps(p.y + (b + m) * ys + o, mask, _mm512_add_ps(acc[m], bias));
    }
  }
};

// q8_0: y for panels [first, last), each against every block of 16 rows of x in turn, every block
// of inputs at once; the first block of x reads the panel from memory (and prefetches ahead), the
// rest from cache.
void q8_0_panel_range(const PanelWork& work, int64_t first, int64_t last) {
  const MatVecParams& p = work.p;
  alignas(64) int32_t sums[2 * kTileRowsX * kPanelRows];
  const auto* weight = static_cast<const std::byte*>(p.weight);
  for (int64_t panel = first; panel < last; ++panel) {
    const int64_t o = panel * kPanelRows, outs = std::min(kPanelRows, p.out - o);
    const auto mask = static_cast<__mmask16>((1u << outs) - 1);
    const __m512 bias =
        p.bias != nullptr ? _mm512_maskz_loadu_ps(mask, p.bias + o) : _mm512_setzero_ps();
    const QuantPanelLayout layout(DType::kQ8_0, p.in);
    const PanelBlocks blocks{weight + panel * layout.panel_bytes(), layout};
    int64_t b = 0;
    for (; b + kTileRowsX < p.n;
         b += 2 * kTileRowsX) {  // two blocks of rows, the second maybe partial
      __m512 acc0[kTileRowsX], acc1[kTileRowsX];
#pragma GCC unroll 16
      for (int m = 0; m < kTileRowsX; ++m) acc0[m] = acc1[m] = _mm512_setzero_ps();
      blocks_times_two_row_blocks(blocks, work.blocks, work.x_tile(b), work.x_scales(b),
                                  work.x_tile(b + kTileRowsX), work.x_scales(b + kTileRowsX),
                                  b == 0, sums, acc0, acc1);
      work.store(b, o, mask, bias, acc0);
      work.store(b + kTileRowsX, o, mask, bias, acc1);
    }
    if (b < p.n) {
      __m512 acc[kTileRowsX];
#pragma GCC unroll 16
      for (int m = 0; m < kTileRowsX; ++m) acc[m] = _mm512_setzero_ps();
      blocks_times_rows(blocks, work.blocks, work.x_tile(b), work.x_scales(b), b == 0, sums, acc);
      work.store(b, o, mask, bias, acc);
    }
  }
}

// q4_0 blocks unpacked at a time: 8 KiB of int8 quants, which every block of 16 rows of x then
// reads from L1.
constexpr int64_t kUnpackBlocks = 16;

// Blocks first.. of a q4_0 panel, their quants unpacked to the q8_0 order (512 bytes each, one
// after another at `unpacked`), their scales the panel's. Nothing to prefetch: the run is in L1.
struct UnpackedBlocks {
  const int8_t* unpacked;
  const std::byte* panel;
  QuantPanelLayout layout;
  int64_t first;
  const std::byte* quants(int64_t k) const {
    return reinterpret_cast<const std::byte*>(unpacked + k * kQ8PanelBlockBytes);
  }
  const std::byte* scales(int64_t k) const { return panel + layout.scales(first + k); }
  void prefetch_pair(int64_t) const {}
};

// Blocks first..first + count - 1 of a q4_0 panel (256 bytes of quants each) -> the q8_0 order
// (512 bytes each) as signed quants: a 64-byte load's low nibbles are chunk v, its high nibbles
// chunk v + 4, each minus 8. Prefetches the panel's lines, its scales' too, as far ahead as the
// q8_0 tiles do (4 KiB).
inline void unpack_q4_0_blocks(const std::byte* panel, const QuantPanelLayout& layout,
                               int64_t first, int64_t count, int8_t* to) {
  const __m512i nibble = _mm512_set1_epi8(0x0F), eight = _mm512_set1_epi8(8);
  for (int64_t k = 0; k < count; ++k) {
    const std::byte* block = panel + layout.quants(first + k);
    if (layout.ends_pair(first + k)) {  // the scales' line
      _mm_prefetch(reinterpret_cast<const char*>(panel + layout.scales(first + k) + kAheadBytes),
                   _MM_HINT_T0);
    }
    int8_t* quants = to + k * kQ8PanelBlockBytes;
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      _mm_prefetch(reinterpret_cast<const char*>(block + kAheadBytes + 64 * v), _MM_HINT_T0);
      const __m512i raw = _mm512_loadu_si512(block + 64 * v);
      const __m512i low = _mm512_sub_epi8(_mm512_and_si512(raw, nibble), eight);
      const __m512i high =
          _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(raw, 4), nibble), eight);
      _mm512_store_si512(quants + 64 * v, low);
      _mm512_store_si512(quants + 64 * (v + 4), high);
    }
  }
}

// q4_0: y for panels [first, last); each panel's blocks kUnpackBlocks at a time unpacked to the
// q8_0 order, then multiplied by every block of 16 rows of x, whose f32 sums wait in y's rows
// between the runs of blocks.
void q4_0_panel_range(const PanelWork& work, int64_t first, int64_t last) {
  const MatVecParams& p = work.p;
  alignas(64) int32_t sums[2 * kTileRowsX * kPanelRows];
  alignas(64) int8_t unpacked[kUnpackBlocks * kQ8PanelBlockBytes];
  const auto* weight = static_cast<const std::byte*>(p.weight);
  for (int64_t panel = first; panel < last; ++panel) {
    const int64_t o = panel * kPanelRows, outs = std::min(kPanelRows, p.out - o);
    const auto mask = static_cast<__mmask16>((1u << outs) - 1);
    const QuantPanelLayout layout(DType::kQ4_0, p.in);
    const std::byte* panel_start = weight + panel * layout.panel_bytes();
    for (int64_t k = 0; k < work.blocks; k += kUnpackBlocks) {
      const int64_t count = std::min(kUnpackBlocks, work.blocks - k);
      const bool last_run = k + count == work.blocks;
      unpack_q4_0_blocks(panel_start, layout, k, count, unpacked);
      const UnpackedBlocks run{unpacked, panel_start, layout, k};
      const __m512 bias = last_run && p.bias != nullptr ? _mm512_maskz_loadu_ps(mask, p.bias + o)
                                                        : _mm512_setzero_ps();
      for (int64_t b = 0; b < p.n; b += kTileRowsX) {
        __m512 acc[kTileRowsX];
#pragma GCC unroll 16
        for (int m = 0; m < kTileRowsX; ++m) {
          acc[m] = k == 0 || b + m >= p.n
                       ? _mm512_setzero_ps()
                       : _mm512_maskz_loadu_ps(mask, p.y + (b + m) * work.ys + o);
        }
        blocks_times_rows(run, count, work.x_tile(b) + k * kXTileBytes,
                          work.x_scales(b) + k * kTileRowsX, false, sums, acc);
        work.store(b, o, mask, bias, acc);
      }
    }
  }
}

}  // namespace

void matvec_amx_quant_panels(const MatVecParams& p, ThreadPool& pool, MatVecScratch& scratch) {
  matvec_amx_quant_panels(&p, 1, pool, scratch);
}

void matvec_amx_quant_panels(const MatVecParams* params, int64_t count, ThreadPool& pool,
                             MatVecScratch& scratch) {
  require_shared_quant_panels(params, count, "matvec_amx_quant_panels");
  const MatVecParams& p = params[0];  // x as every product reads it
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
  quantize_rows(p, pool, [&](int64_t b, const float* x) {
    quantize_q8_0_row_avx512(x, p.in, xq + tile_at(b, 0) * kQB, kTileRowsX * kQB,
                             xs + tile_at(b, 0), kTileRowsX);
  });
  for (int64_t b = p.n; b < padded; ++b) {
    for (int64_t k = 0; k < blocks; ++k) {
      std::memset(xq + tile_at(b, k) * kQB, 0, kQB);
      xs[tile_at(b, k)] = 0.0f;
    }
  }
  const bool q8_0 = p.weight_dtype == DType::kQ8_0;
  const ProductPanels products(params, count);
  const int64_t per_task = rows_per_task_in_panels(p.in, p.n, products.total(), pool.size());
  for_each_task(pool, products.total(), per_task, 1, [&](int64_t first, int64_t last) {
    const AmxTileConfig config = q8_0_tiles_config();
    _tile_loadconfig(&config);
    products.split(first, last, [&](int64_t i, int64_t from, int64_t to) {
      const MatVecParams& product = params[i];
      const PanelWork work{product, xq, xs, blocks,
                           product.y_stride > 0 ? product.y_stride : product.out};
      q8_0 ? q8_0_panel_range(work, from, to) : q4_0_panel_range(work, from, to);
    });
    _tile_release();
  });
}

}  // namespace kvlab
