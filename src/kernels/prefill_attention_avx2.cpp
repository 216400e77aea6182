// prefill_attention's block step for AVX2 + FMA: a block's 16 tokens are two 8-lane vectors. The
// arithmetic of prefill_block_avx512 (the same scores, softmax update and weighted values, in
// f32). Its own file: only it is built with the AVX2 flags.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/exp_nonpositive.h"
#include "kernels/prefill_attention.h"

namespace kvlab {
namespace {

constexpr int64_t kTokens = 16;  // prefill_attention's block, two vectors
constexpr int kRowsAtOnce = 4;   // query rows scored together (each key vector loaded once)

// e^x for 8 lanes of x <= 0 as exp_nonpositive computes it; a NaN stays NaN.
__m256 exp_nonpositive8(__m256 x) {
  x = _mm256_max_ps(_mm256_set1_ps(-87.0f), x);  // the second operand where x is NaN: x
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145752f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860677e-6f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  // 2^n for n >= -126 (x >= -87): the exponent bits
  const __m256i pow2 =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(pow2));
}

// All-ones in the lanes i (of 8, starting at `first`) with first + i < n.
__m256 lanes_below(int64_t first, int64_t n) {
  const __m256i index = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                         _mm256_set1_epi32(static_cast<int>(first)));
  return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), index));
}

float horizontal_max(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
}

float horizontal_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}

// Rows [0, rows) scored s (two halves a row): prefill_block_avx512's update_rows in 8 lanes.
void update_rows(const __m256 (*s)[2], int rows, const int64_t* valid, float scale,
                 const float* values, int64_t vw, float* state) {
  alignas(32) float weights[kRowsAtOnce][kTokens];
  float alpha[kRowsAtOnce];
  float* st[kRowsAtOnce];
  int64_t common = kTokens;
  const __m256 lowest = _mm256_set1_ps(-INFINITY);
  for (int r = 0; r < rows; ++r) {
    st[r] = state + r * (2 + vw);
    const int64_t n = valid[r];
    if (n <= 0) {  // no token of the block: nothing to add, and nothing shared
      common = 0;
      alpha[r] = 1.0f;
      for (int64_t t = 0; t < kTokens; ++t) weights[r][t] = 0.0f;
      continue;
    }
    common = std::min(common, n);
    const __m256 in0 = lanes_below(0, n), in1 = lanes_below(8, n);
    const __m256 s0 = _mm256_mul_ps(s[r][0], _mm256_set1_ps(scale));
    const __m256 s1 = _mm256_mul_ps(s[r][1], _mm256_set1_ps(scale));
    // a NaN score's weight is NaN, and the row's sums with it, as in the reference
    const float block_max = horizontal_max(
        _mm256_max_ps(_mm256_blendv_ps(lowest, s0, in0), _mm256_blendv_ps(lowest, s1, in1)));
    const float new_max = std::max(st[r][0], block_max);
    const __m256 m = _mm256_set1_ps(new_max);
    const __m256 w0 = _mm256_and_ps(in0, exp_nonpositive8(_mm256_sub_ps(s0, m)));
    const __m256 w1 = _mm256_and_ps(in1, exp_nonpositive8(_mm256_sub_ps(s1, m)));
    alpha[r] = exp_nonpositive(st[r][0] - new_max);  // e^-87 on the first block: sums are 0
    st[r][0] = new_max;
    st[r][1] = st[r][1] * alpha[r] + horizontal_sum(_mm256_add_ps(w0, w1));
    _mm256_store_ps(weights[r], w0);
    _mm256_store_ps(weights[r] + 8, w1);
  }
  constexpr int kChunks = 2;  // 16 values a slab: 8 accumulators for four rows
  for (int64_t v0 = 0; v0 < vw; v0 += kChunks * 8) {
    __m256i lanes[kChunks];
    for (int c = 0; c < kChunks; ++c) {
      lanes[c] = _mm256_castps_si256(lanes_below(v0 + c * 8, vw));
    }
    __m256 acc[kRowsAtOnce][kChunks];
    for (int r = 0; r < kRowsAtOnce; ++r) {
      for (int c = 0; c < kChunks; ++c) {
        acc[r][c] = r < rows ? _mm256_mul_ps(_mm256_maskload_ps(st[r] + 2 + v0 + c * 8, lanes[c]),
                                             _mm256_set1_ps(alpha[r]))
                             : _mm256_setzero_ps();
      }
    }
    if (rows == kRowsAtOnce) {
      for (int64_t t = 0; t < common; ++t) {
        const float* value = values + t * vw + v0;
        for (int c = 0; c < kChunks; ++c) {
          const __m256 x = _mm256_maskload_ps(value + c * 8, lanes[c]);
          for (int r = 0; r < kRowsAtOnce; ++r) {
            acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(weights[r][t]), x, acc[r][c]);
          }
        }
      }
    }
    for (int r = 0; r < rows; ++r) {
      for (int64_t t = rows == kRowsAtOnce ? common : 0; t < valid[r]; ++t) {
        const float* value = values + t * vw + v0;
        for (int c = 0; c < kChunks; ++c) {
          acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(weights[r][t]),
                                      _mm256_maskload_ps(value + c * 8, lanes[c]), acc[r][c]);
        }
      }
      for (int c = 0; c < kChunks; ++c)
        _mm256_maskstore_ps(st[r] + 2 + v0 + c * 8, lanes[c], acc[r][c]);
    }
  }
}

}  // namespace

void prefill_block_avx2(const float* q, int64_t kd, const float* keys_t, const float* values,
                        int64_t vw, const int64_t* valid, int64_t n_rows, float scale,
                        float* state) {
  for (int64_t i0 = 0; i0 < n_rows; i0 += kRowsAtOnce) {
    const int rows = static_cast<int>(std::min<int64_t>(n_rows - i0, kRowsAtOnce));
    bool any = false;
    for (int r = 0; r < rows; ++r) any = any || valid[i0 + r] > 0;
    if (!any) continue;
    __m256 s[kRowsAtOnce][2];
    for (auto& row : s) row[0] = row[1] = _mm256_setzero_ps();
    const float* qi = q + i0 * kd;
    for (int64_t e = 0; e < kd; ++e) {
      const __m256 k0 = _mm256_loadu_ps(keys_t + e * kTokens);
      const __m256 k1 = _mm256_loadu_ps(keys_t + e * kTokens + 8);
      for (int r = 0; r < kRowsAtOnce; ++r) {
        if (r >= rows) break;
        const __m256 x = _mm256_set1_ps(qi[r * kd + e]);
        s[r][0] = _mm256_fmadd_ps(x, k0, s[r][0]);
        s[r][1] = _mm256_fmadd_ps(x, k1, s[r][1]);
      }
    }
    update_rows(s, rows, valid + i0, scale, values, vw, state + i0 * (2 + vw));
  }
}

}  // namespace kvlab
