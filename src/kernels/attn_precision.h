#pragma once

#include <string>

#include "kernels/decode_attention.h"

namespace kvlab {

// `--attn-precision` of generate, eval and the benches: "f32", "bf16", "int8" or "auto" (int8 on
// q8_0/q4_0 caches; elsewhere bf16 where the decoder supports it, else f32), for a cache of
// `cache_dtype`. Throws SpecError("attn-precision", …) for any other text, for "bf16" on a
// decoder without AVX-512 BF16, and for "int8" on a cache other than q8_0/q4_0.
AttnPrecision resolve_attn_precision(const std::string& text, bool bf16_supported,
                                     DType cache_dtype = DType::kBf16);

// resolve_attn_precision for one decode over a cache of `cache_dtype`, as `kvlab generate`, the
// serving engine and Python's Decoder take it: "bf16" asked of a cache other than bf16 is refused
// too (bf16 arithmetic reads bf16 rows; "auto" chooses another instead).
AttnPrecision resolve_decode_attn_precision(const std::string& text, bool bf16_supported,
                                            DType cache_dtype);

}  // namespace kvlab
