// prefill_attention's bf16 paths over one set of packed operands (PrefillTileArgs): a tile of 16
// query rows against a stripe's keys and values in blocks of 64 tokens, scores and weighted values
// as bf16 products with f32 sums, the online softmax in AVX-512 between them. The products by AMX
// tiles (prefill_tile_amx), or by AVX-512 BF16's vdpbf16ps where the CPU has no AMX
// (prefill_tile_avx512_bf16: Zen 4 and 5). Its own file: only it is built with the AMX and BF16
// flags (nothing outside prefill_tile_amx emits an AMX instruction).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/amx_tiles.h"
#include "kernels/exp_nonpositive.h"
#include "kernels/prefill_attention.h"

namespace kvlab {
namespace {

constexpr int64_t kTokens = 64;  // a block: two rounds of two score tiles, two depths of values

#include "kernels/exp_nonpositive16.inc"

__mmask16 first_lanes(int64_t n) {
  return n >= 16  ? __mmask16{0xFFFF}
         : n <= 0 ? __mmask16{0}
                  : static_cast<__mmask16>((1u << n) - 1);
}

// How far a row's block maximum may pass the maximum its weights are taken against before the
// tile path moves it (and rescales what the row has summed): weights up to e^8 are no harder on
// bf16 (its rounding is relative) or on f32 sums, and the weighted values can stay in their tiles
// across blocks, scaled only when a maximum moves (the lazy rescaling of FlashAttention-4).
constexpr float kRescaleSlack = 8.0f;

// One block's softmax step for rows [0, 16) of scores (× scale): row r < n_rows sees its first
// tokens up to its length, later rows none. Weights exp(s − ref_r) rounded to bf16 into `weights`
// (0 past a row's tokens), their sum (as rounded) added to the row's state sum. ref_r is the row's
// state max: where the block's maximum passes it by more than `slack` it moves there and alpha_r
// = e^(old − new), what the row's sums so far are scaled by; else alpha_r = 1. Returns whether any
// row's maximum moved.
bool block_weights(const PrefillTileArgs& a, const float (*scores)[kTokens], int64_t t0,
                   float slack, float* alpha, uint16_t (*weights)[kTokens]) {
  const __m512 scale = _mm512_set1_ps(a.scale);
  bool moved = false;
  for (int64_t r = 0; r < 16; ++r) {
    const int64_t n = r < a.n_rows ? std::clamp<int64_t>(a.lengths[r] - t0, 0, kTokens) : 0;
    alpha[r] = 1.0f;
    if (n == 0) {
      _mm512_store_si512(&weights[r][0], _mm512_setzero_si512());
      _mm512_store_si512(&weights[r][32], _mm512_setzero_si512());
      continue;
    }
    float* st = a.state + r * (2 + a.vw);
    __m512 s[4];
    __mmask16 lanes[4];
    __m512 lane_max = _mm512_set1_ps(-INFINITY);  // one reduction a row, not one a quarter
    for (int q = 0; q < 4; ++q) {
      lanes[q] = first_lanes(n - 16 * q);
      s[q] = _mm512_mul_ps(_mm512_load_ps(&scores[r][16 * q]), scale);
      lane_max = _mm512_mask_max_ps(lane_max, lanes[q], lane_max, s[q]);
    }
    const float block_max = _mm512_reduce_max_ps(lane_max);
    if (block_max > st[0] + slack || st[0] == -INFINITY) {
      alpha[r] = exp_nonpositive(st[0] - block_max);  // e^-87 on the first block: sums are 0
      st[0] = block_max;
      moved = true;
    }
    const __m512 ref = _mm512_set1_ps(st[0]);
    __m512 sum = _mm512_setzero_ps();
    for (int q = 0; q < 4; q += 2) {
      // s − ref <= slack: the polynomial's range reduction holds there as below 0
      const __m512 lo = _mm512_maskz_mov_ps(lanes[q], exp_nonpositive16(_mm512_sub_ps(s[q], ref)));
      const __m512 hi =
          _mm512_maskz_mov_ps(lanes[q + 1], exp_nonpositive16(_mm512_sub_ps(s[q + 1], ref)));
      const __m512bh rounded = _mm512_cvtne2ps_pbh(hi, lo);
      const __m512i bits = reinterpret_cast<const __m512i&>(rounded);
      _mm512_store_si512(&weights[r][16 * q], bits);
      // the sum of the weights as rounded, the ones the values are multiplied by
      sum = _mm512_add_ps(sum, _mm512_castsi512_ps(_mm512_slli_epi32(bits, 16)));
      sum = _mm512_add_ps(sum,
                          _mm512_castsi512_ps(_mm512_and_si512(bits, _mm512_set1_epi32(-65536))));
    }
    st[1] = st[1] * alpha[r] + _mm512_reduce_add_ps(sum);
  }
  return moved;
}

// The block's scores [16][64] (rounds of 32 tokens: 1, or 2 where a row sees past the first 32)
// in tiles 0 and 1, through tiles 2 (queries) and 3 (keys).
void block_scores(const PrefillTileArgs& a, int64_t block, int64_t rounds,
                  float (*scores)[kTokens]) {
  const int64_t k_steps = a.kd_pad / 32;
  const int64_t key_block = a.kd_pad / 2 * 32;  // uint16 of one 16-token key block
  for (int64_t round = 0; round < rounds; ++round) {
    const uint16_t* keys = a.keys + (4 * block + 2 * round) * key_block;
    _tile_zero(0);
    _tile_zero(1);
    for (int64_t k = 0; k < k_steps; ++k) {
      _tile_loadd(2, a.q + k * 32, a.kd_pad * 2);
      _tile_loadd(3, keys + k * 16 * 32, 64);
      _tile_dpbf16ps(0, 2, 3);
      _tile_loadd(3, keys + key_block + k * 16 * 32, 64);
      _tile_dpbf16ps(1, 2, 3);
    }
    _tile_stored(0, &scores[0][32 * round], kTokens * 4);
    _tile_stored(1, &scores[0][32 * round + 16], kTokens * 4);
  }
}

// Tiles 4.. 4 + n_chunks − 1 += the block's weights (tile 2) × value chunks c0… (tile 3).
void add_weighted_values(const uint16_t* values, int64_t value_block, int64_t rounds, int64_t c0,
                         int64_t n_chunks, const uint16_t (*weights)[kTokens]) {
  for (int64_t round = 0; round < rounds; ++round) {
    const uint16_t* v = values + round * value_block + c0 * 16 * 32;
    _tile_loadd(2, &weights[0][32 * round], kTokens * 2);
    _tile_loadd(3, v, 64);
    _tile_dpbf16ps(4, 2, 3);
    if (n_chunks > 1) {
      _tile_loadd(3, v + 16 * 32, 64);
      _tile_dpbf16ps(5, 2, 3);
    }
    if (n_chunks > 2) {
      _tile_loadd(3, v + 2 * 16 * 32, 64);
      _tile_dpbf16ps(6, 2, 3);
    }
    if (n_chunks > 3) {
      _tile_loadd(3, v + 3 * 16 * 32, 64);
      _tile_dpbf16ps(7, 2, 3);
    }
  }
}

void store_value_tiles(float (*held)[64]) {
  _tile_stored(4, &held[0][0], 64 * 4);
  _tile_stored(5, &held[0][16], 64 * 4);
  _tile_stored(6, &held[0][32], 64 * 4);
  _tile_stored(7, &held[0][48], 64 * 4);
}

void load_value_tiles(const float (*held)[64]) {
  _tile_loadd(4, &held[0][0], 64 * 4);
  _tile_loadd(5, &held[0][16], 64 * 4);
  _tile_loadd(6, &held[0][32], 64 * 4);
  _tile_loadd(7, &held[0][48], 64 * 4);
}

// Four rows' products of one block by vdpbf16ps, in the tiles' orders: a pair of bf16 elements
// broadcast from the row times 16 tokens' (or value columns') pairs.
constexpr int kRows = 4;

__m512bh pairs_at(const uint16_t* at) { return reinterpret_cast<__m512bh>(_mm512_loadu_si512(at)); }
__m512bh broadcast_pair(const uint16_t* at) {
  uint32_t pair;
  __builtin_memcpy(&pair, at, sizeof pair);
  return reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int32_t>(pair)));
}

void prefill_rows_avx512_bf16(const PrefillTileArgs& a, int64_t r0, int rows) {
  alignas(64) float scores[16][kTokens];
  alignas(64) uint16_t weights[16][kTokens];
  float alpha[16];
  PrefillTileArgs group = a;  // the four rows as a tile of their own for block_weights
  group.lengths = a.lengths + r0;
  group.n_rows = rows;
  group.state = a.state + r0 * (2 + a.vw);
  const int64_t pairs = a.kd_pad / 2, chunks = a.vw_pad / 16;
  const int64_t key_block = pairs * 32, value_block = chunks * 16 * 32;
  const int64_t longest = group.lengths[rows - 1];
  __m512 acc[kRows][4];  // the rows' weighted values, 64 wide at most
  for (int r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < 4; ++c) {
      const __mmask16 lanes = r < rows ? first_lanes(a.vw - 16 * c) : __mmask16{0};
      acc[r][c] = _mm512_maskz_loadu_ps(lanes, group.state + r * (2 + a.vw) + 2 + 16 * c);
    }
  }
  for (int64_t t0 = a.s0; t0 < a.end && t0 < longest; t0 += kTokens) {
    const int64_t block = (t0 - a.s0) / kTokens;
    const int64_t quarters = std::min<int64_t>(4, (longest - t0 + 15) / 16);
    for (int64_t j = 0; j < quarters; ++j) {
      const uint16_t* keys = a.keys + (4 * block + j) * key_block;
      __m512 s[kRows] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                         _mm512_setzero_ps()};
      for (int64_t p = 0; p < pairs; ++p) {
        const __m512bh k = pairs_at(keys + p * 32);
        for (int r = 0; r < kRows; ++r) {
          s[r] = _mm512_dpbf16_ps(s[r], broadcast_pair(a.q + (r0 + r) * a.kd_pad + 2 * p), k);
        }
      }
      for (int r = 0; r < kRows; ++r) _mm512_store_ps(&scores[r][16 * j], s[r]);
    }
    block_weights(group, scores, t0, 0.0f, alpha, weights);
    for (int r = 0; r < kRows; ++r) {
      for (int64_t c = 0; c < chunks; ++c)
        acc[r][c] = _mm512_mul_ps(acc[r][c], _mm512_set1_ps(alpha[r]));
    }
    const uint16_t* values = a.values + 2 * block * value_block;
    for (int64_t p = 0; p < quarters * 8; ++p) {  // token pairs
      const uint16_t* v = values + p / 16 * value_block + p % 16 * 32;
      __m512bh w[kRows];
      for (int r = 0; r < kRows; ++r) w[r] = broadcast_pair(&weights[r][2 * p]);
      for (int64_t c = 0; c < chunks; ++c) {
        const __m512bh x = pairs_at(v + c * 512);
        for (int r = 0; r < kRows; ++r) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], w[r], x);
      }
    }
  }
  for (int r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < chunks; ++c) {
      _mm512_mask_storeu_ps(group.state + r * (2 + a.vw) + 2 + 16 * c, first_lanes(a.vw - 16 * c),
                            acc[r][c]);
    }
  }
}

}  // namespace

// Tiles: 0, 1 scores of 16 tokens each (a block's 64 in two rounds); 2 the A operand (queries,
// then weights); 3 the B operand; 4-7 the weighted values of four 16-wide chunks. Values up to 64
// wide stay in tiles 4-7 across the blocks (rescaled through memory when a row's maximum moves);
// wider ones go through them 64 at a time each block, into the state's sums.
void prefill_tile_amx(const PrefillTileArgs& a) {
  const AmxTileConfig config = full_tiles_config(8);
  _tile_loadconfig(&config);
  alignas(64) float scores[16][kTokens];
  alignas(64) uint16_t weights[16][kTokens];
  alignas(64) float held[16][64];
  float alpha[16];
  const int64_t chunks = a.vw_pad / 16;
  const int64_t value_block = chunks * 16 * 32;  // uint16 of one 32-token value block
  const int64_t longest = a.lengths[a.n_rows - 1];
  const bool resident = chunks <= 4;
  if (resident) {
    for (int64_t r = 0; r < 16; ++r) {
      for (int64_t v = 0; v < 64; ++v) {
        held[r][v] = r < a.n_rows && v < a.vw ? a.state[r * (2 + a.vw) + 2 + v] : 0.0f;
      }
    }
    load_value_tiles(held);
  }
  for (int64_t t0 = a.s0; t0 < a.end; t0 += kTokens) {
    const int64_t block = (t0 - a.s0) / kTokens;
    const int64_t rounds = longest - t0 > 32 ? 2 : 1;
    block_scores(a, block, rounds, scores);
    const uint16_t* values = a.values + 2 * block * value_block;
    if (resident) {
      if (block_weights(a, scores, t0, kRescaleSlack, alpha, weights)) {
        store_value_tiles(held);
        for (int64_t r = 0; r < a.n_rows; ++r) {
          if (alpha[r] == 1.0f) continue;
          for (int64_t v = 0; v < 64; v += 16) {
            _mm512_store_ps(&held[r][v],
                            _mm512_mul_ps(_mm512_load_ps(&held[r][v]), _mm512_set1_ps(alpha[r])));
          }
        }
        load_value_tiles(held);
      }
      add_weighted_values(values, value_block, rounds, 0, chunks, weights);
      continue;
    }
    block_weights(a, scores, t0, 0.0f, alpha, weights);
    for (int64_t c0 = 0; c0 < chunks; c0 += 4) {
      const int64_t n_chunks = std::min<int64_t>(4, chunks - c0);
      _tile_zero(4);
      _tile_zero(5);
      _tile_zero(6);
      _tile_zero(7);
      add_weighted_values(values, value_block, rounds, c0, n_chunks, weights);
      store_value_tiles(held);
      for (int64_t r = 0; r < a.n_rows; ++r) {
        float* acc = a.state + r * (2 + a.vw) + 2;
        const __m512 alpha_r = _mm512_set1_ps(alpha[r]);
        for (int64_t c = 0; c < n_chunks; ++c) {
          const int64_t v = (c0 + c) * 16;
          const __mmask16 lanes = first_lanes(a.vw - v);
          const __m512 old = _mm512_maskz_loadu_ps(lanes, acc + v);
          _mm512_mask_storeu_ps(acc + v, lanes,
                                _mm512_fmadd_ps(old, alpha_r, _mm512_load_ps(&held[r][c * 16])));
        }
      }
    }
  }
  if (resident) {
    store_value_tiles(held);
    for (int64_t r = 0; r < a.n_rows; ++r) {
      for (int64_t v = 0; v < a.vw; ++v) a.state[r * (2 + a.vw) + 2 + v] = held[r][v];
    }
  }
  _tile_release();
}

void prefill_tile_avx512_bf16(const PrefillTileArgs& a) {
  if (a.vw_pad > 64) {
    throw std::invalid_argument("prefill_tile_avx512_bf16: values " + std::to_string(a.vw) +
                                " wide: 64 at most");
  }
  for (int64_t r0 = 0; r0 < a.n_rows; r0 += kRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kRows, a.n_rows - r0));
    if (a.lengths[r0 + rows - 1] > a.s0) prefill_rows_avx512_bf16(a, r0, rows);
  }
}

}  // namespace kvlab
