#include "kernels/matvec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/convert.h"
#include "kernels/gemm.h"

namespace kvlab {

bool matvec_supports(DType dtype) { return dtype != DType::kFp8; }

void reserve_matvec_scratch(const MatVecParams& p, MatVecScratch& scratch) {
  if (is_element_dtype(p.weight_dtype)) return;
  const auto blocks =
      static_cast<size_t>(p.n * ((p.in + kQuantBlockElements - 1) / kQuantBlockElements));
  if (scratch.scales.size() < blocks) scratch.scales.resize(blocks);
  if (scratch.quants.size() < blocks * kQuantBlockElements) {
    scratch.quants.resize(blocks * kQuantBlockElements);
  }
}

void matvec_gemm_bf16(const MatVecParams& p, MatVecScratch& scratch) {
  validate_matvec(p);
  if (p.weight_dtype != DType::kBf16) {
    throw std::invalid_argument("matvec_gemm_bf16: weight_dtype: must be bf16");
  }
  const int64_t xs = p.x_stride > 0 ? p.x_stride : p.in;
  const int64_t ys = p.y_stride > 0 ? p.y_stride : p.out;
  const auto need = static_cast<size_t>(p.n * p.in);
  if (scratch.bf16.size() < need) scratch.bf16.resize(need);
  for (int64_t b = 0; b < p.n; ++b) {
    for (int64_t i = 0; i < p.in; ++i) scratch.bf16[b * p.in + i] = f32_to_bf16(p.x[b * xs + i]);
  }
  // y [n][out] = x [n][in] · Wᵀ, W [out][in] row-major
  gemm_bf16(false, true, p.n, p.out, p.in, scratch.bf16.data(), p.in,
            static_cast<const uint16_t*>(p.weight), p.in, 0.0f, p.y, ys);
  if (p.bias != nullptr) {
    for (int64_t b = 0; b < p.n; ++b)
      for (int64_t o = 0; o < p.out; ++o) p.y[b * ys + o] += p.bias[o];
  }
}

void validate_matvec(const MatVecParams& p) {
  auto require = [](bool ok, const char* field, const char* rule) {
    if (!ok) throw std::invalid_argument(std::string("matvec: ") + field + ": " + rule);
  };
  require(p.weight != nullptr && p.x != nullptr && p.y != nullptr, "weight/x/y", "must be set");
  require(p.n >= 0 && p.in > 0 && p.out > 0, "n/in/out", "n >= 0, in and out > 0");
  require(p.x_stride == 0 || p.x_stride >= p.in, "x_stride", "0 or >= in");
  require(p.y_stride == 0 || p.y_stride >= p.out, "y_stride", "0 or >= out");
  require(matvec_supports(p.weight_dtype), "weight_dtype", "f32, bf16, f16, q8_0 or q4_0");
}

void matvec_reference(const MatVecParams& p) {
  validate_matvec(p);
  const int64_t xs = p.x_stride > 0 ? p.x_stride : p.in;
  const int64_t ys = p.y_stride > 0 ? p.y_stride : p.out;
  const bool blocks = !is_element_dtype(p.weight_dtype);
  const int64_t w_row_bytes = row_bytes(p.weight_dtype, p.in);
  const int64_t x_row_bytes = row_bytes(DType::kQ8_0, p.in);
  const int64_t n_blocks = (p.in + kQuantBlockElements - 1) / kQuantBlockElements;
  const int64_t padded = n_blocks * kQuantBlockElements;
  std::vector<float> w(static_cast<size_t>(padded), 0.0f);
  std::vector<float> x(static_cast<size_t>(padded), 0.0f);
  std::vector<float> w_scale(static_cast<size_t>(n_blocks)), x_scale(w_scale.size());
  std::vector<std::byte> x_blocks(static_cast<size_t>(x_row_bytes));
  // A block's f16 scale, and its elements ÷ that scale: the integer quants.
  auto unscale = [&](const std::byte* row, DType dtype, float* values, float* scales) {
    for (int64_t k = 0; k < n_blocks; ++k) {
      uint16_t bits;
      std::memcpy(&bits, row + k * row_bytes(dtype, kQuantBlockElements), sizeof bits);
      scales[k] = f16_to_f32(bits);
      for (int64_t i = 0; i < kQuantBlockElements; ++i) {
        float& v = values[k * kQuantBlockElements + i];
        v = scales[k] != 0.0f ? std::nearbyint(v / scales[k]) : 0.0f;
      }
    }
  };
  for (int64_t b = 0; b < p.n; ++b) {
    if (blocks) {
      store_rows(p.x + b * xs, 1, p.in, DType::kQ8_0, x_blocks.data());
      load_rows(x_blocks.data(), 1, p.in, DType::kQ8_0, x.data());
      unscale(x_blocks.data(), DType::kQ8_0, x.data(), x_scale.data());
    } else {
      std::copy(p.x + b * xs, p.x + b * xs + p.in, x.begin());
    }
    for (int64_t o = 0; o < p.out; ++o) {
      const auto* row = static_cast<const std::byte*>(p.weight) + o * w_row_bytes;
      load_rows(row, 1, p.in, p.weight_dtype, w.data());
      double sum = p.bias != nullptr ? p.bias[o] : 0.0;
      if (blocks) {
        unscale(row, p.weight_dtype, w.data(), w_scale.data());
        for (int64_t k = 0; k < n_blocks; ++k) {
          double dot = 0;
          for (int64_t i = k * kQuantBlockElements; i < (k + 1) * kQuantBlockElements; ++i) {
            dot += static_cast<double>(w[i]) * x[i];
          }
          sum += static_cast<double>(w_scale[k]) * x_scale[k] * dot;
        }
      } else {
        for (int64_t i = 0; i < p.in; ++i) sum += static_cast<double>(w[i]) * x[i];
      }
      p.y[b * ys + o] = static_cast<float>(sum);
    }
  }
}

}  // namespace kvlab
