// Built with -mavx2 -mfma; reached only through FastDecoder when the CPU has them.
#include <immintrin.h>

#include <algorithm>

#include "kernels/matvec.h"

namespace kvlab {
namespace {

float horizontal_sum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// y[r] = W[r] · x for R consecutive rows (R ≤ 4); x is read once for all of them.
template <int R>
void rows_dot(const float* w, int64_t in, const float* x, float* y) {
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= in; i += 8) {
    const __m256 xv = _mm256_loadu_ps(x + i);
    for (int r = 0; r < R; ++r)
      acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(w + r * in + i), xv, acc[r]);
  }
  for (int r = 0; r < R; ++r) {
    float sum = horizontal_sum(acc[r]);
    for (int64_t k = i; k < in; ++k) sum += w[r * in + k] * x[k];
    y[r] = sum;
  }
}

}  // namespace

void matvec_avx2(const MatVecParams& p, ThreadPool& pool) {
  validate_matvec(p);
  const int64_t xs = p.x_stride > 0 ? p.x_stride : p.in;
  const int64_t ys = p.y_stride > 0 ? p.y_stride : p.out;
  // Blocks of output rows big enough (~64k multiply-adds) that a pool hand-off pays for itself.
  const int64_t macs_per_row = std::max<int64_t>(1, p.in * p.n);
  const int64_t rows_per_block = std::max<int64_t>(4, (65536 / macs_per_row + 3) / 4 * 4);
  const int64_t blocks = (p.out + rows_per_block - 1) / rows_per_block;
  auto block = [&](int64_t blk) {
    const int64_t first = blk * rows_per_block;
    const int64_t last = std::min(p.out, first + rows_per_block);
    float out[4];
    for (int64_t o = first; o < last; o += 4) {
      const int64_t rows = std::min<int64_t>(4, last - o);
      const float* w = p.weight + o * p.in;
      for (int64_t b = 0; b < p.n; ++b) {
        const float* x = p.x + b * xs;
        switch (rows) {
          case 4:
            rows_dot<4>(w, p.in, x, out);
            break;
          case 3:
            rows_dot<3>(w, p.in, x, out);
            break;
          case 2:
            rows_dot<2>(w, p.in, x, out);
            break;
          default:
            rows_dot<1>(w, p.in, x, out);
            break;
        }
        float* y = p.y + b * ys + o;
        for (int64_t r = 0; r < rows; ++r)
          y[r] = out[r] + (p.bias != nullptr ? p.bias[o + r] : 0.0f);
      }
    }
  };
  pool.parallel_for(blocks, block);
}

}  // namespace kvlab
