// The register loops of the compute peaks with AMX tiles: bf16 (tdpbf16ps) and int8 at one q8_0
// block a multiply (tdpbssd). Only called where the CPU has AMX (for int8, AMX int8) and the
// process the tile permission (cpu_supports(CpuIsa::kAmx)).
#include <immintrin.h>

#include <cstdint>

#include "kernels/amx_tiles.h"
#include "kernels/compute_peak.h"

namespace kvlab {
namespace {

constexpr int64_t kTileMacs = 16 * 16 * 32;  // one tdpbf16ps: 16 × 16 sums of 32 products
// A tile multiply is ~700× a vector FMA's work: fewer rounds for the same ~20 ms.
constexpr int64_t kRoundsPerIteration = 16;

}  // namespace

int64_t mac_loop_bf16_amx(int64_t iterations, float* sink) {
  // four f32 sums (tmm0..3) from two A tiles (tmm4, 5) and two B tiles (tmm6, 7), as the dense
  // kernel's two × two pass
  const AmxTileConfig config = full_tiles_config(8);
  _tile_loadconfig(&config);
  alignas(64) uint16_t operand[16 * 32];
  for (int i = 0; i < 16 * 32; ++i) operand[i] = 0x3C00;  // bf16 0.0078125
  _tile_loadd(4, operand, 64);
  _tile_loadd(5, operand, 64);
  _tile_loadd(6, operand, 64);
  _tile_loadd(7, operand, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const int64_t rounds = iterations / kRoundsPerIteration;
  for (int64_t i = 0; i < rounds; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  alignas(64) float sums[16 * 16];
  _tile_stored(0, sums, 64);
  *sink += sums[0];
  _tile_stored(3, sums, 64);
  *sink += sums[255];
  _tile_release();
  return rounds * 4 * kTileMacs;
}

int64_t mac_loop_int8_amx(int64_t iterations, float* sink) {
  // four int32 sums (tmm0..3) from two A tiles of 16 rows × 32 int8 (tmm4, 5) and two B tiles of
  // 8 rows × 64 (tmm6, 7): one q8_0 block a multiply, as matvec_amx_q8_0_panels
  AmxTileConfig config = full_tiles_config(4);
  for (int t = 4; t < 6; ++t) {
    config.rows[t] = 16;
    config.colsb[t] = 32;
    config.rows[t + 2] = 8;
    config.colsb[t + 2] = 64;
  }
  _tile_loadconfig(&config);
  alignas(64) int8_t operand[16 * 64];
  for (int i = 0; i < 16 * 64; ++i) operand[i] = 1;
  _tile_loadd(4, operand, 32);
  _tile_loadd(5, operand, 32);
  _tile_loadd(6, operand, 64);
  _tile_loadd(7, operand, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const int64_t rounds = iterations / kRoundsPerIteration;
  for (int64_t i = 0; i < rounds; ++i) {
    _tile_dpbssd(0, 4, 6);
    _tile_dpbssd(1, 4, 7);
    _tile_dpbssd(2, 5, 6);
    _tile_dpbssd(3, 5, 7);
  }
  alignas(64) int32_t sums[16 * 16];
  _tile_stored(0, sums, 64);
  *sink += static_cast<float>(sums[0]);
  _tile_stored(3, sums, 64);
  *sink += static_cast<float>(sums[255]);
  _tile_release();
  return rounds * 4 * kTileMacs;
}

}  // namespace kvlab
