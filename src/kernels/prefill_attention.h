#pragma once

#include <cstdint>
#include <vector>

#include "kernels/decode_attention.h"

namespace kvlab {

class ThreadPool;

// Rows [first, first + count) of a decode call that look at one sequence: each row's pages begin
// the next row's and it sees no more tokens than the next. A prompt's chunk (DecodeModel::prefill)
// is one run, its rows seeing one token more each.
struct RowRun {
  int64_t first = 0, count = 0;
};

// Rows a run needs before FastDecoder::run gives it to prefill_attention; shorter runs go row by
// row through the decode kernels.
constexpr int64_t kPrefillMinRows = 8;

// The runs of at least min_rows rows in params' page table, in row order (runs cleared first).
void find_row_runs(const DecodeParams& params, int64_t min_rows, std::vector<RowRun>& runs);

// What prefill_attention keeps between calls: it only grows.
struct PrefillWorkspace {
  std::vector<float> floats;
  std::vector<uint16_t> halves;     // bf16 operands of the tile path
  std::vector<int64_t> row_tokens;  // per row of the run
  std::vector<uint8_t> not_finite;  // per reading item of a stripe (the tile path)
};

// How prefill_attention computes a block: AVX2 f32 (prefill_block_avx2), AVX-512 f32
// (prefill_block_avx512), or bf16 products where the call's effective precision is kBf16: AMX
// tiles (prefill_tile_amx) or AVX-512 BF16 (prefill_tile_avx512_bf16, values up to 64 wide);
// elsewhere those two run the AVX-512 f32 path. The caller knows the CPU has the ISA (AMX-BF16 and
// AVX-512 BF16 for kAmx, AVX-512 BF16 for kAvx512Bf16).
enum class PrefillPath { kAvx2, kAvx512, kAvx512Bf16, kAmx };
// For benchmark headers: "amx bf16 tiles (bf16 attention; avx512 f32 otherwise)" and the like.
const char* prefill_path_name(PrefillPath path);

// The rows of one run as decode_attention_reference computes them row by row, each cached row read
// once for all of them instead of once a row. The run's keys and values are read a stripe of tokens
// at a time into matrices (keys rotated, normalised or rebuilt per head on the way, as the decode
// kernels do on read), and the stripe is scored by tiles of query rows (a group's heads of the
// run's rows) against blocks of keys with an online softmax: FlashAttention-2's forward over a
// paged cache, each row masked to its own tokens. rope_table: [positions][key_width] cos | sin
// (FastDecoder::prepare_rope) covering the run's tokens where params.rope_on_read. Throws
// std::invalid_argument for inconsistent params (validate_decode_params) or a run that is not one.
// The arithmetic is f32 whatever params.precision says (kInt8 included), except on the bf16 paths
// (PrefillPath), which compute as AttnPrecision::kBf16 does: queries, keys, weights and values
// rounded to bf16, f32 sums, each weight rounded relative to a running maximum (per 64-token block;
// on AMX one that moves only when passed by more than 8). A run whose values hold a NaN or an
// infinity runs the AVX-512 f32 path instead: a bf16 product multiplies every row by every value
// of a block, and 0 × ∞ would reach rows that do not see that token.
void prefill_attention(const DecodeParams& params, const RowRun& run, ThreadPool& pool,
                       PrefillWorkspace& workspace, const float* rope_table, PrefillPath path);

// One block of 16 keys (keys_t [kd][16], values [16][vw]) for query rows [0, n_rows) (q: kd
// apart), row i seeing the first valid[i] of the block's tokens: scores times `scale`, the online
// softmax update of each row's state [running max, sum, weighted values] (2 + vw apart). Columns
// past a row's tokens are scored but never used (they may be another row's tokens, or stale), so a
// NaN there reaches no row that does not see it. AVX-512 (prefill_attention_avx512.cpp) and
// AVX2 + FMA (prefill_attention_avx2.cpp) builds; the tests hold both to the decode reference.
void prefill_block_avx512(const float* q, int64_t kd, const float* keys_t, const float* values,
                          int64_t vw, const int64_t* valid, int64_t n_rows, float scale,
                          float* state);
void prefill_block_avx2(const float* q, int64_t kd, const float* keys_t, const float* values,
                        int64_t vw, const int64_t* valid, int64_t n_rows, float scale,
                        float* state);

// The bf16 paths' operands, in the orders AMX tiles read: a tile of 16 query rows over a stripe's
// tokens [s0, end) in blocks of 64 (prefill_attention_bf16.cpp).
struct PrefillTileArgs {
  const uint16_t* q = nullptr;       // [16][kd_pad], rows past n_rows zero
  int64_t kd_pad = 0;                // the key width with the rope slice, a multiple of 32
  const uint16_t* keys = nullptr;    // [16-token blocks][kd_pad / 2][16 tokens][2]
  const uint16_t* values = nullptr;  // [32-token blocks][vw_pad / 16][16 token pairs][16][2]
  int64_t vw = 0, vw_pad = 0;        // vw_pad: a multiple of 16
  const int64_t* lengths = nullptr;  // [n_rows]: the tokens each row sees
  int64_t n_rows = 0;                // <= 16
  int64_t s0 = 0, end = 0;
  float scale = 1.0f;
  float* state = nullptr;  // [n_rows][2 + vw]: running max, sum, weighted values
};
void prefill_tile_amx(const PrefillTileArgs& args);
// The same products by vdpbf16ps, four rows at a time; throws std::invalid_argument for values
// wider than 64.
void prefill_tile_avx512_bf16(const PrefillTileArgs& args);

}  // namespace kvlab
