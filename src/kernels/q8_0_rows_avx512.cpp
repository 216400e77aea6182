// Built with AVX-512 F/BW/VL/DQ (and F16C); called only by kernels that are.
#include <immintrin.h>

#include <algorithm>

#include "kernels/q8_0_rows.h"
#include "kernels/row_lanes_avx512.h"

namespace kvlab {
namespace {

constexpr int64_t kBlock = 32;        // a q8_0 block's elements: two registers
constexpr int64_t kGroupBlocks = 16;  // blocks whose scales share one register

// v · inverse rounded half away from zero, as an int32 (the truncation and its remainder are
// exact in f32, as in store_rows' round_to_quant).
inline __m512i round_away(__m512 v, __m512 inverse) {
  const __m512 y = _mm512_mul_ps(v, inverse);
  const __m512 whole = _mm512_roundscale_ps(y, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m512 rest = _mm512_sub_ps(y, whole);
  const __m512 one = _mm512_set1_ps(1.0f);
  __m512 rounded = _mm512_mask_add_ps(
      whole, _mm512_cmp_ps_mask(rest, _mm512_set1_ps(0.5f), _CMP_GE_OQ), whole, one);
  rounded = _mm512_mask_sub_ps(rounded, _mm512_cmp_ps_mask(rest, _mm512_set1_ps(-0.5f), _CMP_LE_OQ),
                               rounded, one);
  return _mm512_cvttps_epi32(rounded);
}

// Sixteen of x's elements from `first`: a plain load inside the row, the lanes past `in` zero
// (load_row_lanes) only at its end. Building a mask for every load took about a quarter of the
// row's time (docs/kernels/dense-decode.md).
inline __m512 load_block_half(const float* x, int64_t in, int64_t first) {
  return first + 16 <= in ? _mm512_loadu_ps(x + first) : load_row_lanes(x, in, first);
}

}  // namespace

void quantize_q8_0_row_avx512(const float* x, int64_t in, int8_t* quants, int64_t quant_stride,
                              float* scales, int64_t scale_stride) {
  const int64_t blocks = (in + kBlock - 1) / kBlock;
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int64_t k0 = 0; k0 < blocks; k0 += kGroupBlocks) {
    const int64_t count = std::min(kGroupBlocks, blocks - k0);
    // each block's amax and whether it holds a NaN, one lane a block
    alignas(64) float amax[kGroupBlocks] = {};
    __mmask16 nan = 0;
    for (int64_t j = 0; j < count; ++j) {
      const int64_t first = (k0 + j) * kBlock;
      const __m512 lo = load_block_half(x, in, first), hi = load_block_half(x, in, first + 16);
      amax[j] = _mm512_reduce_max_ps(
          _mm512_max_ps(_mm512_andnot_ps(sign, lo), _mm512_andnot_ps(sign, hi)));
      const __mmask16 unordered =
          _mm512_cmp_ps_mask(lo, lo, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(hi, hi, _CMP_UNORD_Q);
      nan |= static_cast<__mmask16>((unordered != 0 ? 1u : 0u) << j);
    }
    const __m512 d =
        _mm512_mask_blend_ps(nan, _mm512_div_ps(_mm512_load_ps(amax), _mm512_set1_ps(127.0f)),
                             _mm512_set1_ps(__builtin_nanf("")));
    alignas(64) float inverse[kGroupBlocks];
    _mm512_store_ps(inverse,
                    _mm512_maskz_div_ps(_mm512_cmp_ps_mask(d, _mm512_setzero_ps(), _CMP_GT_OQ),
                                        _mm512_set1_ps(1.0f), d));
    alignas(64) float d_f16[kGroupBlocks];
    _mm512_store_ps(d_f16, _mm512_cvtph_ps(_mm512_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT)));
    for (int64_t j = 0; j < count; ++j) {
      const int64_t k = k0 + j, first = k * kBlock;
      int8_t* q = quants + k * quant_stride;
      scales[k * scale_stride] = d_f16[j];
      if ((nan >> j) & 1) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), _mm256_setzero_si256());
        continue;
      }
      const __m512 inv = _mm512_set1_ps(inverse[j]);
      // int32 -> int8 by truncation: in range except where x · (1 / d) is not finite, which
      // store_rows' lround also turns into 0
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q),
                       _mm512_cvtepi32_epi8(round_away(load_block_half(x, in, first), inv)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16),
                       _mm512_cvtepi32_epi8(round_away(load_block_half(x, in, first + 16), inv)));
    }
  }
}

}  // namespace kvlab
