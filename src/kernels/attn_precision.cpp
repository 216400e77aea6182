#include "kernels/attn_precision.h"

#include <stdexcept>

#include "spec/spec_error.h"

namespace kvlab {

AttnPrecision resolve_attn_precision(const std::string& text, bool bf16_supported,
                                     DType cache_dtype) {
  const bool blocks = cache_dtype == DType::kQ8_0 || cache_dtype == DType::kQ4_0;
  if (text == "auto") {
    if (blocks) return AttnPrecision::kInt8;
    return bf16_supported ? AttnPrecision::kBf16 : AttnPrecision::kF32;
  }
  AttnPrecision precision = AttnPrecision::kF32;
  try {
    precision = parse_attn_precision(text, "attn-precision");
  } catch (const std::invalid_argument&) {
    throw SpecError("attn-precision",
                    "\"" + text.substr(0, 40) + "\": expected f32, bf16, int8 or auto");
  }
  if (precision == AttnPrecision::kBf16 && !bf16_supported) {
    throw SpecError("attn-precision",
                    "bf16 needs AVX-512 BF16 (vdpbf16ps), which this CPU or KVLAB_CPU_ISA level "
                    "does not offer; use f32 or auto");
  }
  if (precision == AttnPrecision::kInt8 && !blocks) {
    throw SpecError("attn-precision", "int8 arithmetic reads q8_0 or q4_0 caches, not " +
                                          std::string(dtype_name(cache_dtype)) +
                                          " ones: add --cache-dtype q8_0 or use f32, bf16 or auto");
  }
  return precision;
}

AttnPrecision resolve_decode_attn_precision(const std::string& text, bool bf16_supported,
                                            DType cache_dtype) {
  if (text == "bf16" && cache_dtype != DType::kBf16) {
    throw SpecError("attn-precision",
                    "bf16 arithmetic runs on bf16 caches: add --cache-dtype bf16");
  }
  return resolve_attn_precision(text, bf16_supported, cache_dtype);
}

}  // namespace kvlab
