#include "kernels/convert.h"

#include <stdexcept>

namespace kvlab {

void store_row(const float* values, int64_t n, DType dtype, void* row) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(row, values, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kBf16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(row)[i] = f32_to_bf16(values[i]);
      return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(row)[i] = f32_to_f16(values[i]);
      return;
    case DType::kFp8:
      break;
  }
  throw std::invalid_argument("fp8 caches are counted, not stored");
}

}  // namespace kvlab
