// Built with AVX-512 F/BW/VL/DQ + VNNI; reached only through FastDecoder when the decoder runs
// AVX-512 (the block dtypes only where the CPU has VNNI: matvec_avx512_takes).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/matvec.h"

namespace kvlab {
namespace {

#include "kernels/matvec_common.inc"

// Sixteen weights of an element-dtype row from element i (the first `count` of them, the rest
// zero), widened to f32.
template <DType D>
__m512 load16(const std::byte* row, int64_t i, __mmask16 mask) {
  if constexpr (D == DType::kF32) {
    return _mm512_maskz_loadu_ps(mask, reinterpret_cast<const float*>(row) + i);
  } else {
    const __m256i half = _mm256_maskz_loadu_epi16(mask, reinterpret_cast<const uint16_t*>(row) + i);
    if constexpr (D == DType::kBf16) {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
    } else {
      return _mm512_cvtph_ps(half);
    }
  }
}

// out[b][r] = W[r] · x_b for R weight rows (row_stride bytes apart) and NB rows of x, sixteen
// elements a pass (the tail masked); the rows `ahead` bytes on are prefetched meanwhile.
template <DType D, int R, int NB>
void tile_elements(const std::byte* w, int64_t row_stride, int64_t ahead, int64_t in,
                   const float* x, int64_t xs, float* out) {
  __m512 acc[NB][R];
  for (int b = 0; b < NB; ++b)
    for (int r = 0; r < R; ++r) acc[b][r] = _mm512_setzero_ps();
  const std::byte* next = w + ahead;
  constexpr int64_t kElementBytes = dtype_bytes(D);
  for (int64_t i = 0; i < in; i += 16) {
    const __mmask16 mask =
        in - i >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (in - i)) - 1);
    if ((i * kElementBytes) % 64 == 0) {
      for (int r = 0; r < R; ++r) {
        _mm_prefetch(reinterpret_cast<const char*>(next + r * row_stride + i * kElementBytes),
                     _MM_HINT_T0);
      }
    }
    __m512 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = load16<D>(w + r * row_stride, i, mask);
    for (int b = 0; b < NB; ++b) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, x + b * xs + i);
      for (int r = 0; r < R; ++r) acc[b][r] = _mm512_fmadd_ps(wv[r], xv, acc[b][r]);
    }
  }
  for (int b = 0; b < NB; ++b)
    for (int r = 0; r < R; ++r) out[b * R + r] = _mm512_reduce_add_ps(acc[b][r]);
}

// Two blocks' 64 quants as int8 (block k in the low half, k + 1 in the high half; past the last
// block zero).
template <DType D>
__m512i two_blocks(const std::byte* first, bool second) {
  const __m256i low = block_quants<D>(first);
  const __m256i high = second ? block_quants<D>(first + block_bytes<D>()) : _mm256_setzero_si256();
  return _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1);
}

__m512 two_scales(float low, float high) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(low)), _mm256_set1_ps(high), 1);
}

float block_scale(const std::byte* block) {
  uint16_t bits;
  std::memcpy(&bits, block, sizeof bits);
  return _cvtsh_ss(bits);
}

// Block weights against rows of x rounded to q8_0 (as matvec_avx2.cpp's), two blocks a pass:
// vpdpbusd on |w| and x with w's sign (x negated where w < 0), scaled per block by d_w · d_x.
template <DType D, int R, int NB>
void tile_blocks(const std::byte* w, int64_t row_stride, int64_t ahead, int64_t blocks,
                 const int8_t* xq, int64_t xs, const float* xd, int64_t ds, float* out) {
  __m512 acc[NB][R];
  for (int b = 0; b < NB; ++b)
    for (int r = 0; r < R; ++r) acc[b][r] = _mm512_setzero_ps();
  const std::byte* next = w + ahead;
  for (int64_t k = 0; k < blocks; k += 2) {
    const bool second = k + 1 < blocks;
    __m512i magnitude[R];
    __mmask64 negative[R];
    __m512 dw[R];
    for (int r = 0; r < R; ++r) {
      const std::byte* block = w + r * row_stride + k * block_bytes<D>();
      _mm_prefetch(reinterpret_cast<const char*>(next + r * row_stride + k * block_bytes<D>()),
                   _MM_HINT_T0);
      const __m512i q = two_blocks<D>(block, second);
      magnitude[r] = _mm512_abs_epi8(q);
      negative[r] = _mm512_movepi8_mask(q);
      dw[r] = two_scales(block_scale(block), second ? block_scale(block + block_bytes<D>()) : 0.0f);
    }
    for (int b = 0; b < NB; ++b) {
      const int8_t* xb = xq + b * xs + k * kQB;
      const __m512i xv =
          second ? _mm512_loadu_si512(xb)
                 : _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb)));
      const __m512i xv_clean = second ? xv : _mm512_inserti64x4(xv, _mm256_setzero_si256(), 1);
      const __m512 dx = two_scales(xd[b * ds + k], second ? xd[b * ds + k + 1] : 0.0f);
      for (int r = 0; r < R; ++r) {
        const __m512i signed_x =
            _mm512_mask_sub_epi8(xv_clean, negative[r], _mm512_setzero_si512(), xv_clean);
        const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), magnitude[r], signed_x);
        acc[b][r] = _mm512_fmadd_ps(_mm512_mul_ps(dw[r], dx), _mm512_cvtepi32_ps(dot), acc[b][r]);
      }
    }
  }
  for (int b = 0; b < NB; ++b)
    for (int r = 0; r < R; ++r) out[b * R + r] = _mm512_reduce_add_ps(acc[b][r]);
}

constexpr int kElementBatch = 4, kBlockBatch = 4;

#include "kernels/matvec_driver.inc"

}  // namespace

void matvec_avx512(const MatVecParams& p, ThreadPool& pool, MatVecScratch& scratch) {
  run_matvec(p, pool, scratch);
}

}  // namespace kvlab
