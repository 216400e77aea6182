// The register loops of the compute peaks with AMX tiles: bf16 (tdpbf16ps), bf16 with every
// round's operand tiles loaded from L1, and int8 at one q8_0 block a multiply (tdpbssd). Only
// called where the CPU has AMX (for int8, AMX int8) and the process the tile permission
// (cpu_supports(CpuIsa::kAmx)).
#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "kernels/amx_tiles.h"
#include "kernels/compute_peak.h"

namespace kvlab {
namespace {

constexpr int64_t kTileMacs =
    16 * 16 * 32;  // a multiply of either loop: 16 × 16 sums of 32 products
// A tile multiply is ~700× a vector FMA's work: fewer rounds for the same ~20 ms.
constexpr int64_t kRoundsPerIteration = 16;

enum class TileLoop {
  kBf16,        // the operands resident in their tiles
  kBf16Loaded,  // each round's two A and two B tiles loaded first
  kInt8,        // resident, one q8_0 block a multiply
};

// Four sums tiles (tmm0..3) from two A tiles (tmm4, 5) and two B tiles (tmm6, 7), as the dense
// kernels' passes: bf16 at full tiles (16 × 16 sums of 32 products), int8 at one q8_0 block a
// multiply (A 16 rows × 32 int8, B 8 rows × 64: 16 × 16 sums of 32 products). kBf16Loaded loads
// a round's operand tiles from a 16 KiB buffer (in L1 after the first round) before its four
// multiplies, as a tile GEMM's inner loop loads them (the dense kernels' bf16 passes: tile_block
// in matvec_amx_bf16_tiles.inc). Every operand is 2^-7 (bf16) or 1 (int8); sums[0] of tmm0 and
// sums[255] of tmm3 go to *sink.
template <TileLoop kLoop>
int64_t tile_loop(int64_t iterations, float* sink) {
  constexpr bool kInt8 = kLoop == TileLoop::kInt8;
  AmxTileConfig config = full_tiles_config(8);
  if constexpr (kInt8) {
    set_q8_0_block_operands(config, 4, 6);
    set_q8_0_block_operands(config, 5, 7);
  }
  const int a_row_bytes = config.colsb[4];
  _tile_loadconfig(&config);
  constexpr int kTiles = 16;  // kBf16Loaded's four loads a round walk 16 tiles of 1 KiB
  alignas(64) uint16_t operands[kTiles][16 * 32];
  for (auto& tile : operands) {
    for (uint16_t& v : tile) v = kInt8 ? 0x0101 : 0x3C00;  // int8 1, 1 / bf16 0.0078125
  }
  _tile_loadd(4, operands[0], a_row_bytes);
  _tile_loadd(5, operands[0], a_row_bytes);
  _tile_loadd(6, operands[0], 64);
  _tile_loadd(7, operands[0], 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const int64_t rounds = iterations / kRoundsPerIteration;
  for (int64_t i = 0; i < rounds; ++i) {
    if constexpr (kLoop == TileLoop::kBf16Loaded) {
      const int t = static_cast<int>(i % (kTiles / 4)) * 4;
      _tile_loadd(4, operands[t], 64);
      _tile_loadd(6, operands[t + 1], 64);
      _tile_loadd(7, operands[t + 2], 64);
      _tile_loadd(5, operands[t + 3], 64);
    }
    if constexpr (kInt8) {
      _tile_dpbssd(0, 4, 6);
      _tile_dpbssd(1, 4, 7);
      _tile_dpbssd(2, 5, 6);
      _tile_dpbssd(3, 5, 7);
    } else {
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  using Sum = std::conditional_t<kInt8, int32_t, float>;
  alignas(64) Sum sums[16 * 16];
  _tile_stored(0, sums, 64);
  *sink += static_cast<float>(sums[0]);
  _tile_stored(3, sums, 64);
  *sink += static_cast<float>(sums[255]);
  _tile_release();
  return rounds * 4 * kTileMacs;
}

}  // namespace

int64_t mac_loop_bf16_amx_loaded(int64_t iterations, float* sink) {
  return tile_loop<TileLoop::kBf16Loaded>(iterations, sink);
}

int64_t mac_loop_bf16_amx(int64_t iterations, float* sink) {
  return tile_loop<TileLoop::kBf16>(iterations, sink);
}

int64_t mac_loop_int8_amx(int64_t iterations, float* sink) {
  return tile_loop<TileLoop::kInt8>(iterations, sink);
}

}  // namespace kvlab
