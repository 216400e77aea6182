#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kvlab {

// Element type of a cache stream.
//  f32, bf16, f16: one value per element.
//  q8_0, q4_0: ggml's blocks of 32 elements, each block an f16 scale d then the elements:
//    q8_0 x = q·d with q int8 (34 bytes a block), q4_0 x = (q − 8)·d with q in 0..15, element i
//    in the low nibble of byte i and element i + 16 in its high nibble (18 bytes a block).
//  fp8: e4m3 elements after one f32 scale per row (x = e4m3 value · scale).
// Every cached head row is quantized on its own: a row of w elements is ceil(w / 32) blocks (the
// last one zero-padded), so blocks never straddle two heads and a kernel reads a head's row
// as one run of bytes.
enum class DType { kF32, kBf16, kF16, kFp8, kQ8_0, kQ4_0 };

constexpr int64_t kQuantBlockElements = 32;

// f32, bf16 and f16 address single elements; the others need their scale.
constexpr bool is_element_dtype(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kBf16 || dtype == DType::kF16;
}

// Bytes per element of an element dtype (constexpr so kernels can use it as a template
// constant); 0 for the scaled dtypes, whose size is row_bytes'.
constexpr int64_t dtype_bytes(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kBf16:
    case DType::kF16:
      return 2;
    case DType::kFp8:
    case DType::kQ8_0:
    case DType::kQ4_0:
      return 0;
  }
  return 0;
}

// Bytes of one cached row of `width` elements, scales included.
constexpr int64_t row_bytes(DType dtype, int64_t width) {
  const int64_t blocks = (width + kQuantBlockElements - 1) / kQuantBlockElements;
  switch (dtype) {
    case DType::kQ8_0:
      return blocks * (2 + kQuantBlockElements);
    case DType::kQ4_0:
      return blocks * (2 + kQuantBlockElements / 2);
    case DType::kFp8:
      return 4 + width;
    default:
      return width * dtype_bytes(dtype);
  }
}

std::string_view dtype_name(DType dtype);
// Accepts f32|bf16|f16|fp8|q8_0|q4_0 (and float32, bfloat16, float16); throws
// SpecError("dtype").
DType parse_dtype(std::string_view text);
// The same, the error naming `field` (a flag or argument: "cache-dtype", "rope_dtype", ...).
DType parse_dtype(std::string_view text, const std::string& field);

}  // namespace kvlab
