#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "spec/dtype.h"

namespace kvlab {

// Scalar element conversions of the cache dtypes; the fast kernels have vector twins.
inline float bf16_to_f32(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float out;
  std::memcpy(&out, &wide, sizeof out);
  return out;
}

// Round to nearest even, NaN stays NaN.
inline uint16_t f32_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu) != 0) {
    return static_cast<uint16_t>((bits >> 16) | 0x40);
  }
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

inline float f16_to_f32(uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, sizeof h);
  return static_cast<float>(h);
}

inline uint16_t f32_to_f16(float value) {
  const _Float16 h = static_cast<_Float16>(value);
  uint16_t bits;
  std::memcpy(&bits, &h, sizeof bits);
  return bits;
}

// Element i of a row stored in an element dtype (f32, bf16 or f16), as f32.
inline float load_element(const void* row, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kF32:
      return static_cast<const float*>(row)[i];
    case DType::kBf16:
      return bf16_to_f32(static_cast<const uint16_t*>(row)[i]);
    case DType::kF16:
      return f16_to_f32(static_cast<const uint16_t*>(row)[i]);
    case DType::kFp8:
    case DType::kQ8_0:
    case DType::kQ4_0:
      break;  // scaled: a row is read whole (load_rows)
  }
  throw std::invalid_argument(std::string("load_element: ") + std::string(dtype_name(dtype)) +
                              " is not an element dtype; read its rows with load_rows");
}

// fp8 e4m3 (OCP "FN": bias 7, no infinities, ±448 the largest, 0x7F/0xFF NaN).
float e4m3_to_f32(uint8_t bits);
// Round to nearest even; magnitudes past 448 saturate to 448, NaN stays NaN.
uint8_t f32_to_e4m3(float value);

// Writes n_rows rows of `width` f32 values as cache rows of `dtype`, each row quantized on its
// own (see DType): n_rows · row_bytes(dtype, width) bytes at dst. A NaN anywhere in a block (or
// an fp8 row) makes the whole block read back NaN.
void store_rows(const float* values, int64_t n_rows, int64_t width, DType dtype, void* dst);
// Reads such rows back as f32: n_rows · width values.
void load_rows(const void* src, int64_t n_rows, int64_t width, DType dtype, float* out);

}  // namespace kvlab
