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
    case DType::kQ8_0:
      return "q8_0";
    case DType::kQ4_0:
      return "q4_0";
  }
  return "?";
}

DType parse_dtype(std::string_view text) {
  if (text == "f32" || text == "float32") return DType::kF32;
  if (text == "bf16" || text == "bfloat16") return DType::kBf16;
  if (text == "f16" || text == "float16") return DType::kF16;
  if (text == "fp8") return DType::kFp8;
  if (text == "q8_0") return DType::kQ8_0;
  if (text == "q4_0") return DType::kQ4_0;
  throw SpecError("dtype", "unknown dtype '" + std::string(text).substr(0, 40) +
                               "' (known: f32, bf16, f16, fp8, q8_0, q4_0)");
}

DType parse_dtype(std::string_view text, const std::string& field) {
  try {
    return parse_dtype(text);
  } catch (const SpecError& e) {
    throw SpecError(field, std::string(e.what()).substr(e.field().size() + 2));
  }
}

}  // namespace kvlab
