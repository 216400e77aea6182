#pragma once

#include <cstdint>

namespace kvlab {

// Row x's first `in` elements rounded to bf16 bit for bit as f32_to_bf16 rounds them (nearest
// even; a NaN stays a quiet NaN; denormals rounded, not flushed), zeros from `in` up to
// `elements` (a multiple of 16): the x of the kernels that multiply bf16 products. 32 elements an
// instruction (AVX-512 BF16's vcvtne2ps2bf16), and its integer twin on the rare 32 that hold a
// denormal, which the instruction flushes to zero. Needs AVX-512 F, BW and BF16; the kernels that
// call it are built for them.
void round_bf16_row_avx512(const float* x, int64_t in, uint16_t* row, int64_t elements);

}  // namespace kvlab
