// The f32 and int8 register loops of the compute peak on AVX2+FMA (8 lanes of f32, 32 of int8).
#include <immintrin.h>

#include "kernels/compute_peak.h"

namespace kvlab {

// 10 independent chains: more than FMA latency (4–5 cycles) × 2 ports, so the ports stay busy.
int64_t mac_loop_f32_avx2(int64_t iterations, float* sink) {
  constexpr int kChains = 10;
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(static_cast<float>(c) * 1e-3f);
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-4f);
  for (int64_t i = 0; i < iterations; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  }
  __m256 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm256_add_ps(sum, acc[c]);
  *sink += _mm256_cvtss_f32(sum);
  return iterations * kChains * 8;
}

// AVX2's fastest exact int8 product: vpmaddubsw (32 unsigned × signed byte products a vector, in
// pairs into int16), its results summed in int16 and widened by vpmaddwd every eight rounds, as
// matvec_avx2_quant_panels runs q4_0's nibbles. (q8_0's signed weights take a vpsignb and a
// vpmaddwd more a product vector there.) 10 chains, as the f32 loop. Every operand 1: each round
// adds 2 to every int16 lane, 16 after eight, within int16.
int64_t mac_loop_int8_avx2(int64_t iterations, float* sink) {
  constexpr int kChains = 10;
  constexpr int64_t kRoundsInInt16 = 8;
  __m256i acc[kChains], pairs[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = pairs[c] = _mm256_setzero_si256();
  const __m256i a = _mm256_set1_epi8(1), ones = _mm256_set1_epi16(1);
  for (int64_t i = 0; i < iterations; ++i) {
    for (int c = 0; c < kChains; ++c) {
      pairs[c] = _mm256_add_epi16(pairs[c], _mm256_maddubs_epi16(a, a));
    }
    if (i % kRoundsInInt16 == kRoundsInInt16 - 1) {
      for (int c = 0; c < kChains; ++c) {
        acc[c] = _mm256_add_epi32(acc[c], _mm256_madd_epi16(pairs[c], ones));
        pairs[c] = _mm256_setzero_si256();
      }
    }
  }
  __m256i sum = acc[0];
  for (int c = 0; c < kChains; ++c) {
    if (c > 0) sum = _mm256_add_epi32(sum, acc[c]);
    sum = _mm256_add_epi32(sum, _mm256_madd_epi16(pairs[c], ones));  // the rounds left over
  }
  // summed as floats, as the AVX-512 loop: the lanes wrap over a long loop
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_cvtepi32_ps(sum));
  for (float lane : lanes) *sink += lane;
  return iterations * kChains * 32;
}

}  // namespace kvlab
