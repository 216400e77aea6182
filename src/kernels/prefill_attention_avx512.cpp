// prefill_attention's block step for AVX-512 (F, DQ): a block's 16 tokens are one vector, so a
// query row's scores are one register. Its own file: only it is built with the AVX-512 flags.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/exp_nonpositive.h"
#include "kernels/prefill_attention.h"

namespace kvlab {
namespace {

constexpr int64_t kTokens = 16;  // prefill_attention's block, one vector
constexpr int kRowsAtOnce = 4;   // query rows scored together (each key vector loaded once)

#include "kernels/exp_nonpositive16.inc"

// The lanes of a 16-wide chunk starting at v that lie below width.
__mmask16 chunk_lanes(int64_t v, int64_t width) {
  return width - v >= 16 ? __mmask16{0xFFFF}
         : width <= v    ? __mmask16{0}
                         : static_cast<__mmask16>((1u << (width - v)) - 1);
}

// Rows [0, rows) of a group scored s: each active row's (valid n > 0) softmax update, then the
// weighted values, each value vector loaded once for the rows (tokens every row sees) and the
// rest row by row, so no row adds a token it does not see (0 × a NaN there would be NaN).
void update_rows(const __m512* s, int rows, const int64_t* valid, float scale, const float* values,
                 int64_t vw, float* state) {
  alignas(64) float weights[kRowsAtOnce][kTokens];
  float alpha[kRowsAtOnce];
  float* st[kRowsAtOnce];
  int64_t common = kTokens;
  for (int r = 0; r < rows; ++r) {
    st[r] = state + r * (2 + vw);
    const int64_t n = valid[r];
    if (n <= 0) continue;
    common = std::min(common, n);
    const __mmask16 lanes = static_cast<__mmask16>((1u << n) - 1);
    const __m512 scaled = _mm512_mul_ps(s[r], _mm512_set1_ps(scale));
    // a NaN score's weight is NaN, and the row's sums with it, as in the reference
    const float new_max = std::max(st[r][0], _mm512_mask_reduce_max_ps(lanes, scaled));
    const __m512 w = _mm512_maskz_mov_ps(
        lanes, exp_nonpositive16(_mm512_sub_ps(scaled, _mm512_set1_ps(new_max))));
    alpha[r] = exp_nonpositive(st[r][0] - new_max);  // e^-87 on the first block: sums are 0
    st[r][0] = new_max;
    st[r][1] = st[r][1] * alpha[r] + _mm512_reduce_add_ps(w);
    _mm512_store_ps(weights[r], w);
  }
  for (int r = 0; r < rows; ++r) {
    if (valid[r] <= 0) {  // no token of the block: nothing to add, and nothing shared
      common = 0;
      alpha[r] = 1.0f;
      for (int64_t t = 0; t < kTokens; ++t) weights[r][t] = 0.0f;
    }
  }
  constexpr int kChunks = 4;  // 64 values a slab: 16 accumulators for four rows
  for (int64_t v0 = 0; v0 < vw; v0 += kChunks * 16) {
    __mmask16 lanes[kChunks];
    for (int c = 0; c < kChunks; ++c) lanes[c] = chunk_lanes(v0 + c * 16, vw);
    __m512 acc[kRowsAtOnce][kChunks];
    for (int r = 0; r < kRowsAtOnce; ++r) {
      for (int c = 0; c < kChunks; ++c) {
        acc[r][c] = r < rows
                        ? _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes[c], st[r] + 2 + v0 + c * 16),
                                        _mm512_set1_ps(alpha[r]))
                        : _mm512_setzero_ps();
      }
    }
    if (rows == kRowsAtOnce) {
      for (int64_t t = 0; t < common; ++t) {
        const float* value = values + t * vw + v0;
        for (int c = 0; c < kChunks; ++c) {
          const __m512 x = _mm512_maskz_loadu_ps(lanes[c], value + c * 16);
          for (int r = 0; r < kRowsAtOnce; ++r) {
            acc[r][c] = _mm512_fmadd_ps(_mm512_set1_ps(weights[r][t]), x, acc[r][c]);
          }
        }
      }
    }
    for (int r = 0; r < rows; ++r) {
      for (int64_t t = rows == kRowsAtOnce ? common : 0; t < valid[r]; ++t) {
        const float* value = values + t * vw + v0;
        for (int c = 0; c < kChunks; ++c) {
          acc[r][c] = _mm512_fmadd_ps(_mm512_set1_ps(weights[r][t]),
                                      _mm512_maskz_loadu_ps(lanes[c], value + c * 16), acc[r][c]);
        }
      }
      for (int c = 0; c < kChunks; ++c) {
        _mm512_mask_storeu_ps(st[r] + 2 + v0 + c * 16, lanes[c], acc[r][c]);
      }
    }
  }
}

}  // namespace

void prefill_block_avx512(const float* q, int64_t kd, const float* keys_t, const float* values,
                          int64_t vw, const int64_t* valid, int64_t n_rows, float scale,
                          float* state) {
  for (int64_t i0 = 0; i0 < n_rows; i0 += kRowsAtOnce) {
    const int rows = static_cast<int>(n_rows - i0 < kRowsAtOnce ? n_rows - i0 : kRowsAtOnce);
    bool any = false;
    for (int r = 0; r < rows; ++r) any = any || valid[i0 + r] > 0;
    if (!any) continue;
    __m512 s[kRowsAtOnce] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                             _mm512_setzero_ps()};
    const float* qi = q + i0 * kd;
    if (rows == kRowsAtOnce) {
      for (int64_t e = 0; e < kd; ++e) {
        const __m512 k = _mm512_loadu_ps(keys_t + e * kTokens);
        s[0] = _mm512_fmadd_ps(_mm512_set1_ps(qi[e]), k, s[0]);
        s[1] = _mm512_fmadd_ps(_mm512_set1_ps(qi[kd + e]), k, s[1]);
        s[2] = _mm512_fmadd_ps(_mm512_set1_ps(qi[2 * kd + e]), k, s[2]);
        s[3] = _mm512_fmadd_ps(_mm512_set1_ps(qi[3 * kd + e]), k, s[3]);
      }
    } else {
      for (int64_t e = 0; e < kd; ++e) {
        const __m512 k = _mm512_loadu_ps(keys_t + e * kTokens);
        for (int r = 0; r < rows; ++r)
          s[r] = _mm512_fmadd_ps(_mm512_set1_ps(qi[r * kd + e]), k, s[r]);
      }
    }
    update_rows(s, rows, valid + i0, scale, values, vw, state + i0 * (2 + vw));
  }
}

}  // namespace kvlab
