// Built with -mavx2 -mfma -mf16c; reached only through FastDecoder when the CPU has them.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/matvec.h"

namespace kvlab {
namespace {

#include "kernels/matvec_common.inc"

float horizontal_sum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// Eight weights of an element-dtype row from element i, widened to f32.
template <DType D>
__m256 load8(const std::byte* row, int64_t i) {
  if constexpr (D == DType::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i);
  } else {
    const __m128i half = _mm_loadu_si128(
        reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(row) + i));
    if constexpr (D == DType::kBf16) {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
    } else {
      return _mm256_cvtph_ps(half);
    }
  }
}

// Weight i of an element-dtype row (the tails past the last eight).
template <DType D>
float load1(const std::byte* row, int64_t i) {
  if constexpr (D == DType::kF32) {
    return reinterpret_cast<const float*>(row)[i];
  } else {
    const uint16_t bits = reinterpret_cast<const uint16_t*>(row)[i];
    if constexpr (D == DType::kBf16) {
      const uint32_t wide = static_cast<uint32_t>(bits) << 16;
      float value;
      std::memcpy(&value, &wide, sizeof value);
      return value;
    } else {
      return _cvtsh_ss(bits);
    }
  }
}

// out[b][r] = W[r] · x_b for R weight rows (row_stride bytes apart) and NB rows of x: each
// weight vector is loaded (and widened) once for the NB rows.
template <DType D, int R, int NB>
void tile_elements(const std::byte* w, int64_t row_stride, int64_t ahead, int64_t in,
                   const float* x, int64_t xs, float* out) {
  __m256 acc[NB][R];
  for (int b = 0; b < NB; ++b)
    for (int r = 0; r < R; ++r) acc[b][r] = _mm256_setzero_ps();
  // the rows `ahead` bytes on in each run (walk_rows) are fetched while these are multiplied
  const std::byte* next = w + ahead;
  constexpr int64_t kElementBytes = dtype_bytes(D);
  int64_t i = 0;
  for (; i + 8 <= in; i += 8) {
    if ((i * kElementBytes) % 64 == 0) {
      for (int r = 0; r < R; ++r)
        _mm_prefetch(reinterpret_cast<const char*>(next + r * row_stride + i * kElementBytes),
                     _MM_HINT_T0);
    }
    __m256 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = load8<D>(w + r * row_stride, i);
    for (int b = 0; b < NB; ++b) {
      const __m256 xv = _mm256_loadu_ps(x + b * xs + i);
      for (int r = 0; r < R; ++r) acc[b][r] = _mm256_fmadd_ps(wv[r], xv, acc[b][r]);
    }
  }
  for (int b = 0; b < NB; ++b) {
    for (int r = 0; r < R; ++r) {
      float sum = horizontal_sum(acc[b][r]);
      for (int64_t k = i; k < in; ++k) sum += load1<D>(w + r * row_stride, k) * x[b * xs + k];
      out[b * R + r] = sum;
    }
  }
}

// The same for block weights against rows of x already rounded to q8_0 (quants [NB][blocks · 32]
// xs apart, scales [NB][blocks] ds apart): per block pair an exact integer dot product
// (vpmaddubsw on |w| and x with w's sign, then vpmaddwd), scaled by both blocks' scales.
template <DType D, int R, int NB>
void tile_blocks(const std::byte* w, int64_t row_stride, int64_t ahead, int64_t blocks,
                 const int8_t* xq, int64_t xs, const float* xd, int64_t ds, float* out) {
  __m256 acc[NB][R];
  for (int b = 0; b < NB; ++b)
    for (int r = 0; r < R; ++r) acc[b][r] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  const std::byte* next = w + ahead;  // prefetched as in tile_elements
  for (int64_t k = 0; k < blocks; ++k) {
    for (int r = 0; r < R; ++r)
      _mm_prefetch(reinterpret_cast<const char*>(next + r * row_stride + k * block_bytes<D>()),
                   _MM_HINT_T0);
    __m256i magnitude[R], wq[R];
    float dw[R];
    for (int r = 0; r < R; ++r) {
      const std::byte* block = w + r * row_stride + k * block_bytes<D>();
      wq[r] = block_quants<D>(block);
      magnitude[r] = _mm256_sign_epi8(wq[r], wq[r]);
      uint16_t bits;
      std::memcpy(&bits, block, sizeof bits);
      dw[r] = _cvtsh_ss(bits);
    }
    for (int b = 0; b < NB; ++b) {
      const __m256i xv =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * xs + k * kQB));
      const float d = xd[b * ds + k];
      for (int r = 0; r < R; ++r) {
        const __m256i pairs = _mm256_maddubs_epi16(magnitude[r], _mm256_sign_epi8(xv, wq[r]));
        const __m256 dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
        acc[b][r] = _mm256_fmadd_ps(_mm256_set1_ps(dw[r] * d), dot, acc[b][r]);
      }
    }
  }
  for (int b = 0; b < NB; ++b)
    for (int r = 0; r < R; ++r) out[b * R + r] = horizontal_sum(acc[b][r]);
}

constexpr int kElementBatch = 2, kBlockBatch = 2;

#include "kernels/matvec_driver.inc"

}  // namespace

void matvec_avx2(const MatVecParams& p, ThreadPool& pool, MatVecScratch& scratch) {
  run_matvec(p, pool, scratch);
}

}  // namespace kvlab
