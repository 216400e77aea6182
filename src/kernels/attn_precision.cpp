#include "kernels/attn_precision.h"

#include <stdexcept>

#include "spec/spec_error.h"

namespace kvlab {

AttnPrecision resolve_attn_precision(const std::string& text, bool bf16_supported) {
  if (text == "auto") return bf16_supported ? AttnPrecision::kBf16 : AttnPrecision::kF32;
  AttnPrecision precision = AttnPrecision::kF32;
  try {
    precision = parse_attn_precision(text, "attn-precision");
  } catch (const std::invalid_argument&) {
    throw SpecError("attn-precision", "\"" + text.substr(0, 40) + "\": expected f32, bf16 or auto");
  }
  if (precision == AttnPrecision::kBf16 && !bf16_supported) {
    throw SpecError("attn-precision",
                    "bf16 needs AVX-512 BF16 (vdpbf16ps), which this CPU or KVLAB_CPU_ISA level "
                    "does not offer; use f32 or auto");
  }
  return precision;
}

}  // namespace kvlab
