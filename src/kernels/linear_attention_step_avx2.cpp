// AVX2 + FMA linear-attention decode step (built with -mavx2 -mfma).
#include <immintrin.h>

#include <cmath>
#include <vector>

#include "kernels/linear_attention_step.h"

namespace kvlab {

void linear_step_avx2(const LinearStepParams& p, ThreadPool& pool) {
  validate_linear_step(p);
  const int64_t d = p.head_dim, per_head = d * d + d;
  pool.parallel_for(p.n_seqs * p.n_heads, [&](int64_t item) {
    const float* z = p.z + item * d;
    float* S = p.state + item * per_head;
    float* s = S + d * d;
    float* out = p.out + item * d;
    double denominator = 0;
    for (int64_t i = 0; i < d; ++i) {
      const float phi = z[i] > 0 ? z[i] + 1.0f : std::exp(z[i]);
      s[i] += phi;
      denominator += static_cast<double>(phi) * s[i];
    }
    const float inv = static_cast<float>(1.0 / denominator);
    // column chunks of 32: rows updated in place and read back while in registers
    int64_t c = 0;
    for (; c + 32 <= d; c += 32) {
      __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                       _mm256_setzero_ps()};
      __m256 zc[4];
      for (int k = 0; k < 4; ++k) zc[k] = _mm256_loadu_ps(z + c + 8 * k);
      for (int64_t i = 0; i < d; ++i) {
        const float phi_i = z[i] > 0 ? z[i] + 1.0f : std::exp(z[i]);
        const __m256 phi = _mm256_set1_ps(phi_i);
        float* row = S + i * d + c;
        for (int k = 0; k < 4; ++k) {
          const __m256 r = _mm256_fmadd_ps(phi, zc[k], _mm256_loadu_ps(row + 8 * k));
          _mm256_storeu_ps(row + 8 * k, r);
          acc[k] = _mm256_fmadd_ps(phi, r, acc[k]);
        }
      }
      const __m256 vinv = _mm256_set1_ps(inv);
      for (int k = 0; k < 4; ++k) _mm256_storeu_ps(out + c + 8 * k, _mm256_mul_ps(acc[k], vinv));
    }
    for (; c < d; ++c) {
      float acc = 0.0f;
      for (int64_t i = 0; i < d; ++i) {
        const float phi_i = z[i] > 0 ? z[i] + 1.0f : std::exp(z[i]);
        S[i * d + c] += phi_i * z[c];
        acc += phi_i * S[i * d + c];
      }
      out[c] = acc * inv;
    }
  });
}

}  // namespace kvlab
