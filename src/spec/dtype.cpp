#include "spec/dtype.h"

#include <string>

#include "spec/spec_error.h"

namespace kvlab {

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kBf16:
      return "bf16";
    case DType::kF16:
      return "f16";
    case DType::kFp8:
      return "fp8";
  }
  return "?";
}

DType parse_dtype(std::string_view text) {
  if (text == "f32" || text == "float32") return DType::kF32;
  if (text == "bf16" || text == "bfloat16") return DType::kBf16;
  if (text == "f16" || text == "float16") return DType::kF16;
  if (text == "fp8") return DType::kFp8;
  throw SpecError("dtype",
                  "unknown dtype '" + std::string(text) + "' (known: f32, bf16, f16, fp8)");
}

}  // namespace kvlab
