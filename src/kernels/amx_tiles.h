#pragma once

#include <cstdint>

namespace kvlab {

// LDTILECFG's 64-byte operand (palette 1): each tile's rows and bytes a row; tiles left at 0 are
// unused. The AMX kernels (decode attention's tile scores, the dense layers' bf16 products, the
// bf16 compute peak) each load one before their tiles and release them after.
struct alignas(64) AmxTileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tiles 0..count-1 at their largest: 16 rows of 64 bytes.
inline AmxTileConfig full_tiles_config(int count) {
  AmxTileConfig c;
  for (int t = 0; t < count; ++t) {
    c.rows[t] = 16;
    c.colsb[t] = 64;
  }
  return c;
}

// The operands of one q8_0 block a multiply (32 inputs, the depth q8_0 weights' per-block scales
// allow): tile `a` 16 rows of x × 32 int8, tile `b` 8 rows of 16 outputs × 4 int8.
inline void set_q8_0_block_operands(AmxTileConfig& c, int a, int b) {
  c.rows[a] = 16;
  c.colsb[a] = 32;
  c.rows[b] = 8;
  c.colsb[b] = 64;
}

}  // namespace kvlab
