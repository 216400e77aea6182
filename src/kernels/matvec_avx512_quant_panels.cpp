// Built with AVX-512 F/BW/VL/DQ + VNNI; reached only through FastDecoder where q8_0 or q4_0
// weights are stored in panels (fastest_weight_order: a CPU with AVX-512 VNNI), at every batch, or
// with AMX int8 below the tile kernel's threshold (quant_tile_min_rows).
#include <immintrin.h>

#include <algorithm>
#include <cmath>  // NAN in q8_0_blocks.inc
#include <cstring>
#include <utility>

#include "kernels/matvec.h"
#include "kernels/q8_0_rows.h"
#include "kernels/rows_in_the_job.h"

namespace kvlab {
namespace {

#include "kernels/matvec_common.inc"
#include "kernels/matvec_panel_tiles.inc"
#include "kernels/matvec_write_panels.inc"
#include "kernels/quant_panel_tile.inc"

// y for panels [first, last): NP panels at a time, one from each of walk_rows's NP runs (then the
// rest one by one), each group against the rows of x NB at a time; the first rows of x read the
// panels from memory, the rest from cache. Runs, not NP neighbouring panels: each run is one
// stream through memory, which its tiles' prefetches run ahead in across panels (neighbouring
// panels restarted every stream each NP panels, their first 4 KiB unprefetched).
template <DType D>
void panel_range(const MatVecParams& p, const uint8_t* xq, const float* xs, const int32_t* xbias,
                 int64_t first, int64_t last) {
  const QuantPanelLayout layout(D, p.in);
  const int64_t blocks = layout.blocks;
  const auto* weight = static_cast<const std::byte*>(p.weight);
  // The tiles after a group's first read its panels from cache: q8_0's without prefetching them,
  // which measured faster; q4_0's still prefetch, which measured faster for them
  // (docs/kernels/dense-decode.md, "q8_0's later tiles without prefetches").
  constexpr bool kLaterTilesPrefetch = D == DType::kQ4_0;
  const auto tile = [&]<int NB, int NP>(int64_t panel, int64_t spread, int64_t b) {
    __m512 acc[NB][NP] = {};
    const std::byte* at = weight + panel * layout.panel_bytes();
    const uint8_t* x_rows = xq + b * blocks * kQB;
    if (b == 0 || kLaterTilesPrefetch) {
      tile_blocks<D, NB, NP>(at, spread, layout, x_rows, blocks * kQB, xs + b * blocks,
                             xbias + b * blocks, blocks, acc);
    } else {
      tile_blocks<D, NB, NP, AllTileParts, false>(at, spread, layout, x_rows, blocks * kQB,
                                                  xs + b * blocks, xbias + b * blocks, blocks, acc);
    }
    write_panels<NP, NB>(p, panel, spread, b, acc);
  };
  // rows of x a tile: with two panels six (q8_0: 12 integer and 12 f32 sums, the two panels' loads
  // and scales, x's broadcast, 30 of the 32 registers), then four (q4_0 at six spills: its low and
  // high nibbles take four more); with four panels up to two
  const auto rows = [&]<int NP>(int64_t panel, int64_t spread) {
    int64_t b = 0;
    if constexpr (NP == 2) {
      if constexpr (D == DType::kQ8_0) {
        for (; b + 6 <= p.n; b += 6) tile.template operator()<6, NP>(panel, spread, b);
      }
      for (; b + 4 <= p.n; b += 4) tile.template operator()<4, NP>(panel, spread, b);
      if (p.n - b == 3) {
        tile.template operator()<3, NP>(panel, spread, b);
        return;
      }
    }
    for (; b + 2 <= p.n; b += 2) tile.template operator()<2, NP>(panel, spread, b);
    if (b < p.n) tile.template operator()<1, NP>(panel, spread, b);
  };
  if (p.n <= 2) {
    walk_rows<4>(first, last, rows);
  } else {
    walk_rows<2>(first, last, rows);
  }
}

template <DType D>
void quant_panels(const MatVecParams* params, int64_t count, ThreadPool& pool,
                  MatVecScratch& scratch) {
  const MatVecParams& p = params[0];  // x as every product reads it
  const int64_t blocks = q8_0_blocks(p.in);
  auto* xq = reinterpret_cast<uint8_t*>(scratch.quants.data());  // [n][blocks · 32]
  float* xs = scratch.scales.data();                             // [n][blocks]
  int32_t* xbias = scratch.block_bias.data();                    // [n][blocks]
  // x's rows rounded to q8_0 by the tasks themselves
  RowsInTheJob quantizing(p.n, pool.size());
  const int64_t x_stride = p.x_stride > 0 ? p.x_stride : p.in;
  const auto quantize_row = [&](int64_t b) {
    auto* row = reinterpret_cast<int8_t*>(xq + b * blocks * kQB);
    quantize_q8_0_row_avx512(p.x + b * x_stride, p.in, row, kQB, xs + b * blocks, 1);
    // q8_0: the weights + 128 are vpdpbusd's unsigned operand, so the sums start at −128 · Σ q_x;
    // q4_0: the nibbles (the weights + 8), at −8 · Σ q_x
    block_corrections(row, blocks, D == DType::kQ8_0 ? 128 : 8, xbias + b * blocks);
  };
  const ProductPanels products(params, count);
  // whole runs of four panels
  const int64_t per_task =
      (rows_per_task_in_panels(p.in, p.n, products.total(), pool.size()) + 3) / 4 * 4;
  for_each_task(pool, products.total(), per_task, 4, [&](int64_t first, int64_t last) {
    quantizing.ready(quantize_row);
    products.split(first, last, [&](int64_t i, int64_t from, int64_t to) {
      panel_range<D>(params[i], xq, xs, xbias, from, to);
    });
  });
}

}  // namespace

void matvec_quant_panels(const MatVecParams& p, ThreadPool& pool, MatVecScratch& scratch) {
  matvec_quant_panels(&p, 1, pool, scratch);
}

void matvec_quant_panels(const MatVecParams* params, int64_t count, ThreadPool& pool,
                         MatVecScratch& scratch) {
  require_shared_quant_panels(params, count, "matvec_quant_panels");
  const MatVecParams& p = params[0];
  if (p.n == 0) return;
  reserve_matvec_scratch(p, scratch);
  p.weight_dtype == DType::kQ8_0 ? quant_panels<DType::kQ8_0>(params, count, pool, scratch)
                                 : quant_panels<DType::kQ4_0>(params, count, pool, scratch);
}

}  // namespace kvlab
