// Built with AVX-512 F/BW/VL/DQ + VNNI; reached only through FastDecoder where q8_0 or q4_0
// weights are stored in panels (fastest_weight_order: q4_0 on a CPU with AVX-512 VNNI, q8_0 where
// it has AMX int8 too), at every batch, or with AMX int8 below the tile kernel's threshold
// (quant_tile_min_rows).
#include <immintrin.h>

#include <algorithm>
#include <cmath>  // NAN in q8_0_blocks.inc
#include <cstring>

#include "kernels/matvec.h"
#include "kernels/q8_0_rows.h"

namespace kvlab {
namespace {

#include "kernels/matvec_common.inc"
#include "kernels/matvec_q8_0_x.inc"
#include "kernels/matvec_write_panels.inc"

// How far ahead, in its own panel, a tile prefetches its quants: 4 KiB, as the row kernels'
// kPrefetchBytes.
constexpr int64_t kAheadBytes = 4096;

// Four of x's bytes, elements 4v..4v+3 of block k, in every lane.
inline __m512i x_quad(const void* block, int64_t v) {
  int32_t four;
  std::memcpy(&four, static_cast<const char*>(block) + 4 * v, sizeof four);
  return _mm512_set1_epi32(four);
}

// acc[b][j] (+)= panel j's sixteen rows · x_b for NB rows of x (xq_stride bytes apart; scales xs
// and, for q4_0, the block sums' corrections xbias xs_stride apart) and NP panels from the one
// whose quants and scales are at `w` and `scales`, every block. The integer sums of a block are
// exact; then one scaled add into the f32 sums.
// - q8_0: x biased to unsigned (q + 128); each of a block's eight 64-byte loads of a panel one
//   vpdpbusd per row of x against four of its bytes broadcast, and one against ones: the panel's
//   sums, which × 128 are what x's bias added.
// - q4_0: x signed; each of a block's four 64-byte loads of a panel two operands (its low and
//   high nibbles, the weights + 8, unsigned), each one vpdpbusd per row of x; the sums start at
//   −8 · Σ q_x (xbias), which takes the weights' offset back out.
template <DType D, int NB, int NP>
void tile_blocks(const std::byte* w, const std::byte* scales, int64_t blocks, const uint8_t* xq,
                 int64_t xq_stride, const float* xs, const int32_t* xbias, int64_t xs_stride,
                 __m512 (&acc)[NB][NP]) {
  const int64_t block_bytes = quant_panel_block_bytes(D);
  const int64_t panel_stride = blocks * block_bytes;
  const int64_t scale_stride = blocks * kQ8PanelScaleBytes;
  for (int64_t k = 0; k < blocks; ++k) {
    __m512i dot[NB][NP], sum[NP];
    const std::byte* block = w + k * block_bytes;
    const auto load = [&](int j, int64_t v) {
      const std::byte* at = block + j * panel_stride + 64 * v;
      _mm_prefetch(reinterpret_cast<const char*>(at + kAheadBytes), _MM_HINT_T0);
      return _mm512_loadu_si512(at);
    };
    if constexpr (D == DType::kQ8_0) {
      const __m512i ones = _mm512_set1_epi8(1);
#pragma GCC unroll 4
      for (int j = 0; j < NP; ++j) {
        sum[j] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int b = 0; b < NB; ++b) dot[b][j] = _mm512_setzero_si512();
      }
#pragma GCC unroll 8
      for (int64_t v = 0; v < kQB / 4; ++v) {
        __m512i wv[NP];
#pragma GCC unroll 4
        for (int j = 0; j < NP; ++j) {
          wv[j] = load(j, v);
          sum[j] = _mm512_dpbusd_epi32(sum[j], ones, wv[j]);
        }
#pragma GCC unroll 4
        for (int b = 0; b < NB; ++b) {
          const __m512i xv = x_quad(xq + b * xq_stride + k * kQB, v);
#pragma GCC unroll 4
          for (int j = 0; j < NP; ++j) dot[b][j] = _mm512_dpbusd_epi32(dot[b][j], xv, wv[j]);
        }
      }
#pragma GCC unroll 4
      for (int j = 0; j < NP; ++j) {
        sum[j] = _mm512_slli_epi32(sum[j], 7);
#pragma GCC unroll 4
        for (int b = 0; b < NB; ++b) dot[b][j] = _mm512_sub_epi32(dot[b][j], sum[j]);
      }
    } else {
      const __m512i nibble = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 4
      for (int b = 0; b < NB; ++b) {
        const __m512i start = _mm512_set1_epi32(xbias[b * xs_stride + k]);
#pragma GCC unroll 4
        for (int j = 0; j < NP; ++j) dot[b][j] = start;
      }
#pragma GCC unroll 4
      for (int64_t v = 0; v < kQB / 8; ++v) {
        __m512i low[NP], high[NP];
#pragma GCC unroll 4
        for (int j = 0; j < NP; ++j) {
          const __m512i raw = load(j, v);
          low[j] = _mm512_and_si512(raw, nibble);
          high[j] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), nibble);
        }
#pragma GCC unroll 4
        for (int b = 0; b < NB; ++b) {
          const uint8_t* xb = xq + b * xq_stride + k * kQB;
          const __m512i x_low = x_quad(xb, v), x_high = x_quad(xb, v + 4);
#pragma GCC unroll 4
          for (int j = 0; j < NP; ++j) {
            dot[b][j] = _mm512_dpbusd_epi32(dot[b][j], low[j], x_low);
            dot[b][j] = _mm512_dpbusd_epi32(dot[b][j], high[j], x_high);
          }
        }
      }
    }
    __m512 dw[NP];
#pragma GCC unroll 4
    for (int j = 0; j < NP; ++j) {
      const std::byte* at = scales + j * scale_stride + k * kQ8PanelScaleBytes;
      dw[j] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(at)));
    }
#pragma GCC unroll 4
    for (int b = 0; b < NB; ++b) {
      const __m512 dx = _mm512_set1_ps(xs[b * xs_stride + k]);
#pragma GCC unroll 4
      for (int j = 0; j < NP; ++j) {
        const __m512 exact = _mm512_cvtepi32_ps(dot[b][j]);
        acc[b][j] = _mm512_fmadd_ps(exact, _mm512_mul_ps(dw[j], dx), acc[b][j]);
      }
    }
  }
}

// y for panels [first, last): NP panels at a time (then one), each group against the rows of x
// NB at a time (then one by one); the first rows of x read the panels from memory, the rest from
// cache.
template <DType D>
void panel_range(const MatVecParams& p, const uint8_t* xq, const float* xs, const int32_t* xbias,
                 int64_t first, int64_t last) {
  const int64_t blocks = q8_0_blocks(p.in);
  const auto* weight = static_cast<const std::byte*>(p.weight);
  const auto tile = [&]<int NB, int NP>(int64_t panel, int64_t b) {
    __m512 acc[NB][NP] = {};
    tile_blocks<D, NB, NP>(weight + quant_panel_quants(D, p.in, panel),
                           weight + quant_panel_scales(D, p.out, p.in, panel), blocks,
                           xq + b * blocks * kQB, blocks * kQB, xs + b * blocks, xbias + b * blocks,
                           blocks, acc);
    write_panels<NP, NB>(p, panel, 1, b, acc);  // the NP panels side by side
  };
  // rows of x a tile: four (two panels), or up to two (four panels): ≤ 26 of the 32 registers
  const auto rows = [&]<int NP>(int64_t panel) {
    int64_t b = 0;
    if constexpr (NP == 2) {
      for (; b + 4 <= p.n; b += 4) tile.template operator()<4, NP>(panel, b);
      if (p.n - b == 3) {
        tile.template operator()<3, NP>(panel, b);
        return;
      }
    }
    for (; b + 2 <= p.n; b += 2) tile.template operator()<2, NP>(panel, b);
    if (b < p.n) tile.template operator()<1, NP>(panel, b);
  };
  int64_t panel = first;
  if (p.n <= 2) {
    for (; panel + 4 <= last; panel += 4) rows.template operator()<4>(panel);
  }
  for (; panel + 2 <= last; panel += 2) rows.template operator()<2>(panel);
  if (panel < last) rows.template operator()<1>(panel);
}

template <DType D>
void quant_panels(const MatVecParams& p, ThreadPool& pool, MatVecScratch& scratch) {
  const int64_t blocks = q8_0_blocks(p.in);
  auto* xq = reinterpret_cast<uint8_t*>(scratch.quants.data());  // [n][blocks · 32]
  float* xs = scratch.scales.data();                             // [n][blocks]
  int32_t* xbias = scratch.block_bias.data();                    // [n][blocks], q4_0
  quantize_rows(p, pool, [&](int64_t b, const float* x) {
    auto* row = reinterpret_cast<int8_t*>(xq + b * blocks * kQB);
    quantize_q8_0_row_avx512(x, p.in, row, kQB, xs + b * blocks, 1);
    if constexpr (D == DType::kQ8_0) {
      // + 128: the unsigned operand of vpdpbusd
      const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
      for (int64_t e = 0; e < blocks * kQB; e += 64) {
        const auto mask = static_cast<__mmask64>(
            blocks * kQB - e >= 64 ? ~uint64_t{0} : (uint64_t{1} << (blocks * kQB - e)) - 1);
        _mm512_mask_storeu_epi8(row + e, mask,
                                _mm512_xor_si512(_mm512_maskz_loadu_epi8(mask, row + e), flip));
      }
    } else {
      for (int64_t k = 0; k < blocks; ++k) {
        int32_t sum = 0;
        for (int64_t e = 0; e < kQB; ++e) sum += row[k * kQB + e];
        xbias[b * blocks + k] = -8 * sum;
      }
    }
  });
  int64_t per_task = (rows_per_task(p.in, p.n, p.out, pool.size()) + kPanelRows - 1) / kPanelRows;
  per_task = (per_task + 3) / 4 * 4;  // whole runs of four panels
  for_each_task(pool, panel_count(p.out), per_task, [&](int64_t first, int64_t last) {
    panel_range<D>(p, xq, xs, xbias, first, last);
  });
}

}  // namespace

void matvec_quant_panels(const MatVecParams& p, ThreadPool& pool, MatVecScratch& scratch) {
  require_quant_panels(p, "matvec_quant_panels");
  if (p.n == 0) return;
  reserve_matvec_scratch(p, scratch);
  p.weight_dtype == DType::kQ8_0 ? quant_panels<DType::kQ8_0>(p, pool, scratch)
                                 : quant_panels<DType::kQ4_0>(p, pool, scratch);
}

}  // namespace kvlab
