// prefill_attention's f32 block step for AVX2 + FMA: prefill_block.inc over 8 lanes, a block's 16
// tokens two vectors. Its own file: only it is built with the AVX2 flags.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/exp_nonpositive.h"
#include "kernels/prefill_attention.h"

namespace kvlab {
namespace {

// e^x for 8 lanes of x <= 0 as exp_nonpositive computes it; a NaN stays NaN (the decode kernels'
// exp256 turns one into a weight of about 0, where the reference's sums stay NaN).
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

struct Lanes8 {
  using V = __m256;
  using M = __m256;  // all-ones lanes
  static constexpr int kWidth = 8;
  static constexpr int kChunks = 2;  // 16 values a slab: 8 accumulators for four rows
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V load(const float* at) { return _mm256_loadu_ps(at); }
  static void store(float* at, V x) { _mm256_storeu_ps(at, x); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static M below(int64_t first, int64_t n) {
    const __m256i index = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                           _mm256_set1_epi32(static_cast<int>(first)));
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), index));
  }
  static V load_masked(M m, const float* at) {
    return _mm256_maskload_ps(at, _mm256_castps_si256(m));
  }
  static void store_masked(M m, float* at, V x) {
    _mm256_maskstore_ps(at, _mm256_castps_si256(m), x);
  }
  static V lowest_outside(M m, V x) { return _mm256_blendv_ps(set1(-INFINITY), x, m); }
  static V zero_outside(M m, V x) { return _mm256_and_ps(m, x); }
  static float max_lane(V v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
  }
  static float sum_lanes(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
  }
  static V exp(V x) { return exp_nonpositive8(x); }
};

#include "kernels/prefill_block.inc"

}  // namespace

void prefill_block_avx2(const float* q, int64_t kd, const float* keys_t, const float* values,
                        int64_t vw, const int64_t* valid, int64_t n_rows, float scale,
                        float* state) {
  prefill_block_lanes<Lanes8>(q, kd, keys_t, values, vw, valid, n_rows, scale, state);
}

}  // namespace kvlab
