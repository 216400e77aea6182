#pragma once

#include <cstdint>

namespace kvlab {

// Row x's first `in` elements as ggml's q8_0 blocks, bit for bit as store_rows rounds them (d =
// amax / 127, q = x · (1 / d) rounded half away from zero, the scale rounded to f16; zeros past
// `in`; a NaN makes the block's scale NaN and its quants 0), sixteen blocks at a time in AVX-512
// registers: the x of the kernels over q8_0 and q4_0 panels, rounded once a row per call. Block
// k's 32 quants go to quants + k · quant_stride bytes, its scale (the f16 value as f32) to
// scales[k · scale_stride]. Needs AVX-512 F, BW, VL, DQ; the kernels that call it are built for it.
void quantize_q8_0_row_avx512(const float* x, int64_t in, int8_t* quants, int64_t quant_stride,
                              float* scales, int64_t scale_stride);

}  // namespace kvlab
