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

uint16_t* reserve_expanded_panels(MatVecScratch& scratch, int64_t elements) {
  if (static_cast<int64_t>(scratch.expanded.size()) < elements) {
    scratch.expanded.resize(static_cast<size_t>(elements));
  }
  return scratch.expanded.data();
}

void reserve_matvec_scratch(const MatVecParams& p, MatVecScratch& scratch) {
  if (p.weight_dtype == DType::kBf16 ||
      (p.weight_order == WeightOrder::kPanels && takes_quant_panels(p.weight_dtype))) {
    // whole blocks of rows at the AMX kernel's stride (the widest of the bf16 kernels' layouts)
    const int64_t rows = (p.n + kBf16TileRows - 1) / kBf16TileRows * kBf16TileRows;
    const auto need = static_cast<size_t>(rows * bf16_tile_row_stride(p.in));
    if (scratch.bf16.size() < need) scratch.bf16.resize(need);
  }
  if (is_element_dtype(p.weight_dtype)) return;
  // q8_0 panels: whole blocks of 16 rows (the AMX kernel's layout of x, the wider of the two)
  const int64_t rows = p.weight_order == WeightOrder::kPanels
                           ? (p.n + kPanelRows - 1) / kPanelRows * kPanelRows
                           : p.n;
  const auto blocks =
      static_cast<size_t>(rows * ((p.in + kQuantBlockElements - 1) / kQuantBlockElements));
  if (scratch.scales.size() < blocks) scratch.scales.resize(blocks);
  if (scratch.quants.size() < blocks * kQuantBlockElements) {
    scratch.quants.resize(blocks * kQuantBlockElements);
  }
  if (p.weight_order == WeightOrder::kPanels) {  // the VNNI panel kernel's block corrections
    if (scratch.block_bias.size() < blocks) scratch.block_bias.resize(blocks);
  }
}

void matvec_gemm_bf16(const MatVecParams& p, MatVecScratch& scratch) {
  require_weights(p, "matvec_gemm_bf16", WeightOrder::kRows, DType::kBf16);
  const int64_t xs = p.x_stride > 0 ? p.x_stride : p.in;
  const int64_t ys = p.y_stride > 0 ? p.y_stride : p.out;
  reserve_matvec_scratch(p, scratch);
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

void matvec_gemm_f32(const MatVecParams& p) {
  require_weights(p, "matvec_gemm_f32", WeightOrder::kRows, DType::kF32);
  const int64_t xs = p.x_stride > 0 ? p.x_stride : p.in;
  const int64_t ys = p.y_stride > 0 ? p.y_stride : p.out;
  // y [n][out] = x [n][in] · Wᵀ, W [out][in] row-major
  sgemm(false, true, p.n, p.out, p.in, 1.0f, p.x, xs, static_cast<const float*>(p.weight), p.in,
        0.0f, p.y, ys);
  if (p.bias != nullptr) {
    for (int64_t b = 0; b < p.n; ++b)
      for (int64_t o = 0; o < p.out; ++o) p.y[b * ys + o] += p.bias[o];
  }
}

void require_weights(const MatVecParams& p, const char* caller, WeightOrder order,
                     std::optional<DType> dtype) {
  validate_matvec(p);
  if (dtype && p.weight_dtype != *dtype) {
    throw std::invalid_argument(std::string(caller) + ": weight_dtype: must be " +
                                std::string(dtype_name(*dtype)));
  }
  if (p.weight_order != order) {
    throw std::invalid_argument(std::string(caller) + ": weight_order: must be " +
                                weight_order_name(order));
  }
}

void require_quant_panels(const MatVecParams& p, const char* caller) {
  require_weights(p, caller, WeightOrder::kPanels);
  if (!takes_quant_panels(p.weight_dtype)) {
    throw std::invalid_argument(std::string(caller) + ": weight_dtype: must be q8_0 or q4_0");
  }
}

namespace {

// The first field in which b does not read x as a does, or nullptr.
const char* unshared_field(const MatVecParams& a, const MatVecParams& b) {
  if (a.x != b.x) return "x";
  if (a.x_stride != b.x_stride) return "x_stride";
  if (a.n != b.n) return "n";
  if (a.in != b.in) return "in";
  if (a.weight_dtype != b.weight_dtype) return "weight_dtype";
  if (a.weight_order != b.weight_order) return "weight_order";
  return nullptr;
}

}  // namespace

bool shares_x(const MatVecParams& a, const MatVecParams& b) {
  return unshared_field(a, b) == nullptr;
}

void require_shared_x(const MatVecParams* params, int64_t count, const char* caller) {
  if (count < 1 || count > kMaxSharedProducts) {
    throw std::invalid_argument(std::string(caller) + ": count: must be 1.." +
                                std::to_string(kMaxSharedProducts) + ", not " +
                                std::to_string(count));
  }
  for (int64_t i = 1; i < count; ++i) {
    if (const char* field = unshared_field(params[0], params[i])) {
      throw std::invalid_argument(std::string(caller) + ": product " + std::to_string(i) + ": " +
                                  field + ": must be the first product's (products that share x)");
    }
  }
}

void require_shared_bf16_panels(const MatVecParams* params, int64_t count, const char* caller) {
  require_shared_x(params, count, caller);
  for (int64_t i = 0; i < count; ++i) {
    require_weights(params[i], caller, WeightOrder::kPanels, DType::kBf16);
  }
}

void require_shared_float_panels(const MatVecParams* params, int64_t count, const char* caller) {
  require_shared_x(params, count, caller);
  for (int64_t i = 0; i < count; ++i) {
    require_weights(params[i], caller, WeightOrder::kPanels);
    if (!takes_float_panels(params[i].weight_dtype)) {
      throw std::invalid_argument(std::string(caller) + ": weight_dtype: must be f32 or f16");
    }
  }
}

void require_shared_quant_panels(const MatVecParams* params, int64_t count, const char* caller) {
  require_shared_x(params, count, caller);
  for (int64_t i = 0; i < count; ++i) require_quant_panels(params[i], caller);
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
  require(p.weight_order == WeightOrder::kRows || p.weight_order == WeightOrder::kPanels,
          "weight_order", "rows or panels");
}

namespace {

// A q8_0 / q4_0 block's f16 scale and its integer quants (elements ÷ scale, exact), read with
// load_rows; stack arrays only, so the scalar decode step allocates nothing.
float block_quants(const std::byte* block, DType dtype, float* quants) {
  uint16_t bits;
  std::memcpy(&bits, block, sizeof bits);
  const float scale = f16_to_f32(bits);
  load_rows(block, 1, kQuantBlockElements, dtype, quants);
  for (int64_t i = 0; i < kQuantBlockElements; ++i) {
    quants[i] = scale != 0.0f ? std::nearbyint(quants[i] / scale) : 0.0f;
  }
  return scale;
}

}  // namespace

void matvec_reference(const MatVecParams& p) {
  validate_matvec(p);
  const int64_t xs = p.x_stride > 0 ? p.x_stride : p.in;
  const int64_t ys = p.y_stride > 0 ? p.y_stride : p.out;
  const int64_t w_row_bytes = row_bytes(p.weight_dtype, p.in);
  const int64_t n_blocks = (p.in + kQuantBlockElements - 1) / kQuantBlockElements;
  const int64_t w_block_bytes = row_bytes(p.weight_dtype, kQuantBlockElements);
  for (int64_t b = 0; b < p.n; ++b) {
    const float* x = p.x + b * xs;
    for (int64_t o = 0; o < p.out; ++o) {
      const auto* row = static_cast<const std::byte*>(p.weight) + o * w_row_bytes;
      double sum = p.bias != nullptr ? p.bias[o] : 0.0;
      if (p.weight_order == WeightOrder::kPanels && p.weight_dtype == DType::kBf16) {
        const auto* panels = static_cast<const uint16_t*>(p.weight);
        for (int64_t i = 0; i < p.in; ++i) {
          sum += static_cast<double>(bf16_to_f32(panels[bf16_panel_index(p.in, o, i)])) * x[i];
        }
      } else if (p.weight_order == WeightOrder::kPanels && is_element_dtype(p.weight_dtype)) {
        const auto* panels = static_cast<const std::byte*>(p.weight);
        for (int64_t i = 0; i < p.in; ++i) {
          const int64_t at = float_panel_index(p.weight_dtype, p.in, o, i);
          sum += static_cast<double>(load_element(panels, p.weight_dtype, at)) * x[i];
        }
      } else if (is_element_dtype(p.weight_dtype)) {
        for (int64_t i = 0; i < p.in; ++i) {
          sum += static_cast<double>(load_element(row, p.weight_dtype, i)) * x[i];
        }
      } else {  // x rounded to q8_0 per block as store_rows does; integer dots, both scales
        for (int64_t k = 0; k < n_blocks; ++k) {
          float x_block[kQuantBlockElements] = {}, x_quants[kQuantBlockElements];
          float w_quants[kQuantBlockElements];
          std::byte x_q8[row_bytes(DType::kQ8_0, kQuantBlockElements)];
          const int64_t first = k * kQuantBlockElements;
          std::copy(x + first, x + std::min(p.in, first + kQuantBlockElements), x_block);
          store_rows(x_block, 1, kQuantBlockElements, DType::kQ8_0, x_q8);
          const float x_scale = block_quants(x_q8, DType::kQ8_0, x_quants);
          std::byte w_block[row_bytes(DType::kQ8_0, kQuantBlockElements)];  // ≥ a q4_0 block
          const std::byte* w_q = row + k * w_block_bytes;
          if (p.weight_order == WeightOrder::kPanels) {
            quant_panel_block(p.weight_dtype, static_cast<const std::byte*>(p.weight), p.out, p.in,
                              o, k, w_block);
            w_q = w_block;
          }
          const float w_scale = block_quants(w_q, p.weight_dtype, w_quants);
          double dot = 0;
          for (int64_t i = 0; i < kQuantBlockElements; ++i) {
            dot += static_cast<double>(w_quants[i]) * x_quants[i];
          }
          sum += static_cast<double>(w_scale) * x_scale * dot;
        }
      }
      p.y[b * ys + o] = static_cast<float>(sum);
    }
  }
}

}  // namespace kvlab
