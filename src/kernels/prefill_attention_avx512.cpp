// prefill_attention's f32 block step for AVX-512 (F, DQ): prefill_block.inc over 16 lanes, a
// block's 16 tokens one vector. Its own file: only it is built with the AVX-512 flags.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/exp_nonpositive.h"
#include "kernels/prefill_attention.h"

namespace kvlab {
namespace {

#include "kernels/exp_nonpositive16.inc"

struct Lanes16 {
  using V = __m512;
  using M = __mmask16;
  static constexpr int kWidth = 16;
  static constexpr int kChunks = 4;  // 64 values a slab: 16 accumulators for four rows
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V load(const float* at) { return _mm512_loadu_ps(at); }
  static void store(float* at, V x) { _mm512_storeu_ps(at, x); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static M below(int64_t first, int64_t n) {
    return n - first >= 16 ? M{0xFFFF}
           : n <= first    ? M{0}
                           : static_cast<M>((1u << (n - first)) - 1);
  }
  static V load_masked(M m, const float* at) { return _mm512_maskz_loadu_ps(m, at); }
  static void store_masked(M m, float* at, V x) { _mm512_mask_storeu_ps(at, m, x); }
  static V lowest_outside(M m, V x) { return _mm512_mask_mov_ps(set1(-INFINITY), m, x); }
  static V zero_outside(M m, V x) { return _mm512_maskz_mov_ps(m, x); }
  static float max_lane(V x) { return _mm512_reduce_max_ps(x); }
  static float sum_lanes(V x) { return _mm512_reduce_add_ps(x); }
  static V exp(V x) { return exp_nonpositive16(x); }
};

#include "kernels/prefill_block.inc"

}  // namespace

void prefill_block_avx512(const float* q, int64_t kd, const float* keys_t, const float* values,
                          int64_t vw, const int64_t* valid, int64_t n_rows, float scale,
                          float* state) {
  prefill_block_lanes<Lanes16>(q, kd, keys_t, values, vw, valid, n_rows, scale, state);
}

}  // namespace kvlab
