#pragma once

#include <string>

#include "kernels/decode_attention.h"

namespace kvlab {

// `--attn-precision` of generate, eval and the benches: "f32", "bf16" or "auto" (bf16 where
// the decoder supports it, else f32). Throws SpecError("attn-precision", …) for any other
// text, and for "bf16" on a decoder without AVX-512 BF16.
AttnPrecision resolve_attn_precision(const std::string& text, bool bf16_supported);

}  // namespace kvlab
