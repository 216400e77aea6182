// The f32 register loop of the compute peak on AVX2+FMA (8 lanes).
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

}  // namespace kvlab
