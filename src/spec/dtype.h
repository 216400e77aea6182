#pragma once

#include <cstdint>
#include <string_view>

namespace kvlab {

// Element type of a cache stream. fp8 exists for counting only: no kernel reads it.
enum class DType { kF32, kBf16, kF16, kFp8 };

int64_t dtype_bytes(DType dtype);
std::string_view dtype_name(DType dtype);
// Accepts f32|bf16|f16|fp8 (and float32, bfloat16, float16); throws SpecError("dtype").
DType parse_dtype(std::string_view text);

}  // namespace kvlab
