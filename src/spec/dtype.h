#pragma once

#include <cstdint>
#include <string_view>

namespace kvlab {

// Element type of a cache stream. fp8 exists for counting only: no kernel reads it.
enum class DType { kF32, kBf16, kF16, kFp8 };

// Bytes per element; constexpr so kernels can use it as a template constant.
constexpr int64_t dtype_bytes(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kBf16:
    case DType::kF16:
      return 2;
    case DType::kFp8:
      return 1;
  }
  return 0;
}
std::string_view dtype_name(DType dtype);
// Accepts f32|bf16|f16|fp8 (and float32, bfloat16, float16); throws SpecError("dtype").
DType parse_dtype(std::string_view text);

}  // namespace kvlab
