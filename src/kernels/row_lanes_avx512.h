#pragma once

// For the AVX-512 builds that round x's rows (q8_0_rows_avx512.cpp, bf16_rows_avx512.cpp): include
// only from files built with AVX-512 F.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

namespace kvlab {

// Elements [first, first + 16) of a row of `in` elements at x, zeros past `in`. Static: each file
// keeps the copy its own flags compiled (an inline one would be merged across ISA builds).
static inline __m512 load_row_lanes(const float* x, int64_t in, int64_t first) {
  const int64_t left = std::clamp<int64_t>(in - first, 0, 16);
  return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << left) - 1), x + first);
}

}  // namespace kvlab
