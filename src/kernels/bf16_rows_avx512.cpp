// Built with AVX-512 F/BW/VL/DQ + BF16; called only by kernels that are.
#include <immintrin.h>

#include "kernels/bf16_rows.h"
#include "kernels/row_lanes_avx512.h"

namespace kvlab {
namespace {

// f32_to_bf16 on sixteen lanes in integer arithmetic: the rounding bias added to the bits, NaNs
// truncated and made quiet.
inline __m256i round_exact(__m512 v) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i exponent = _mm512_set1_epi32(0x7F800000);
  const __mmask16 nan = _mm512_cmpeq_epi32_mask(_mm512_and_si512(bits, exponent), exponent) &
                        _mm512_test_epi32_mask(bits, _mm512_set1_epi32(0x007FFFFF));
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  __m512i top = _mm512_srli_epi32(
      _mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), odd)), 16);
  top = _mm512_mask_or_epi32(top, nan, _mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(top);
}

// The lanes of v that hold a denormal (exponent bits 0, mantissa not).
inline __mmask16 denormals(__m512 v) {
  const __m512i bits = _mm512_castps_si512(v);
  return _mm512_testn_epi32_mask(bits, _mm512_set1_epi32(0x7F800000)) &
         _mm512_test_epi32_mask(bits, _mm512_set1_epi32(0x007FFFFF));
}

}  // namespace

void round_bf16_row_avx512(const float* x, int64_t in, uint16_t* row, int64_t elements) {
  int64_t i = 0;
  for (; i + 32 <= elements; i += 32) {
    const __m512 lo = load_row_lanes(x, in, i), hi = load_row_lanes(x, in, i + 16);
    if (__builtin_expect((denormals(lo) | denormals(hi)) != 0, 0)) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(row + i), round_exact(lo));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(row + i + 16), round_exact(hi));
    } else {
      // NaNs as f32_to_bf16: truncated, quiet bit set
      _mm512_storeu_si512(row + i, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
    }
  }
  if (i < elements) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(row + i), round_exact(load_row_lanes(x, in, i)));
  }
}

}  // namespace kvlab
