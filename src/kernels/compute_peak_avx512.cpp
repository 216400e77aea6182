// The register loops of the compute peak on AVX-512: f32 FMA (F), bf16 dot products (BF16),
// int8 dot products (VNNI). Only called where the CPU has the extension.
#include <immintrin.h>

#include "kernels/compute_peak.h"

namespace kvlab {
namespace {

constexpr int kChains = 12;  // independent accumulators: above latency × ports on Zen4 and SPR

}  // namespace

int64_t mac_loop_f32_avx512(int64_t iterations, float* sink) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c) * 1e-3f);
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-4f);
  for (int64_t i = 0; i < iterations; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  }
  __m512 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
  *sink += _mm512_reduce_add_ps(sum);
  return iterations * kChains * 16;
}

int64_t mac_loop_bf16_avx512(int64_t iterations, float* sink) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_setzero_ps();
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(2e-3f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.5f), _mm512_set1_ps(0.25f));
  for (int64_t i = 0; i < iterations; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
  }
  __m512 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
  *sink += _mm512_reduce_add_ps(sum);
  return iterations * kChains * 32;
}

int64_t mac_loop_int8_avx512(int64_t iterations, float* sink) {
  __m512i acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_setzero_si512();
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  for (int64_t i = 0; i < iterations; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbusd_epi32(acc[c], a, b);
  }
  __m512i sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm512_add_epi32(sum, acc[c]);
  // summed as floats: the lanes wrap over a long loop, and _mm512_reduce_add_epi32 adds them as
  // signed ints, where an overflow is undefined (UBSan stops on it)
  *sink += _mm512_reduce_add_ps(_mm512_cvtepi32_ps(sum));
  return iterations * kChains * 64;
}

}  // namespace kvlab
