#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/matvec.h"

namespace kvlab {
namespace {

constexpr int64_t kScaleBytes = 2;

void require_width(int64_t width, const char* caller) {
  if (width <= 0) throw std::invalid_argument(std::string(caller) + ": width: must be > 0");
}

}  // namespace

void pack_bf16_panels(const uint16_t* rows, int64_t out, int64_t in, std::byte* panels) {
  if (out <= 0 || in <= 0) throw std::invalid_argument("pack_bf16_panels: out/in: must be > 0");
  auto* packed = reinterpret_cast<uint16_t*>(panels);
  std::memset(panels, 0, static_cast<size_t>(bf16_panel_bytes(out, in)));
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) packed[bf16_panel_index(in, o, i)] = rows[o * in + i];
  }
}

void pack_float_panels(DType dtype, const std::byte* rows, int64_t out, int64_t in,
                       std::byte* panels) {
  if (!takes_float_panels(dtype)) {
    throw std::invalid_argument("pack_float_panels: dtype: must be f32 or f16, not " +
                                std::string(dtype_name(dtype)));
  }
  if (out <= 0 || in <= 0) throw std::invalid_argument("pack_float_panels: out/in: must be > 0");
  const int64_t element_bytes = dtype_bytes(dtype);
  std::memset(panels, 0, static_cast<size_t>(float_panel_bytes(dtype, out, in)));
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) {
      std::memcpy(panels + float_panel_index(dtype, in, o, i) * element_bytes,
                  rows + (o * in + i) * element_bytes, static_cast<size_t>(element_bytes));
    }
  }
}

namespace {

void require_quant_dtype(DType dtype, const char* caller) {
  if (!takes_quant_panels(dtype)) {
    throw std::invalid_argument(std::string(caller) + ": dtype: must be q8_0 or q4_0, not " +
                                std::string(dtype_name(dtype)));
  }
}

// Where quant byte j of row r (the bytes after the scale: 32 int8 for q8_0, 16 nibble pairs for
// q4_0) lies among its block's quants (matvec.h has the order).
int64_t block_quant_offset(int64_t r, int64_t j) { return 64 * (j / 4) + 4 * r + j % 4; }

}  // namespace

void pack_quant_panels(DType dtype, const std::byte* ggml_rows, int64_t out, int64_t in,
                       std::byte* panels) {
  require_quant_dtype(dtype, "pack_quant_panels");
  if (out <= 0 || in <= 0) throw std::invalid_argument("pack_quant_panels: out/in: must be > 0");
  const QuantPanelLayout layout(dtype, in);
  const int64_t stride = row_bytes(dtype, in);
  const int64_t block_bytes = row_bytes(dtype, kQuantBlockElements);
  std::memset(panels, 0, static_cast<size_t>(quant_panel_bytes(dtype, out, in)));
  for (int64_t o = 0; o < out; ++o) {
    const int64_t r = o % kPanelRows;
    std::byte* panel = panels + quant_panel_start(dtype, in, o / kPanelRows);
    for (int64_t k = 0; k < layout.blocks; ++k) {
      const std::byte* block = ggml_rows + o * stride + k * block_bytes;
      std::memcpy(panel + layout.scales(k) + r * kScaleBytes, block, kScaleBytes);
      for (int64_t j = 0; j < block_bytes - kScaleBytes; ++j) {
        panel[layout.quants(k) + block_quant_offset(r, j)] = block[kScaleBytes + j];
      }
    }
  }
}

void pack_panels(DType dtype, const std::byte* rows, int64_t out, int64_t in, std::byte* panels) {
  if (dtype == DType::kBf16) {
    pack_bf16_panels(reinterpret_cast<const uint16_t*>(rows), out, in, panels);
  } else if (takes_float_panels(dtype)) {
    pack_float_panels(dtype, rows, out, in, panels);
  } else {
    pack_quant_panels(dtype, rows, out, in, panels);  // refuses what has no panels
  }
}

void quant_panel_block(DType dtype, const std::byte* panels, int64_t out, int64_t in, int64_t o,
                       int64_t k, std::byte* block) {
  require_quant_dtype(dtype, "quant_panel_block");
  require_width(in, "quant_panel_block");
  if (k < 0 || k >= q8_0_blocks(in)) {
    throw std::invalid_argument("quant_panel_block: k: must be in [0, blocks)");
  }
  if (o < 0 || o >= out) throw std::invalid_argument("quant_panel_block: o: must be in [0, out)");
  const QuantPanelLayout layout(dtype, in);
  const int64_t r = o % kPanelRows;
  const std::byte* panel = panels + quant_panel_start(dtype, in, o / kPanelRows);
  std::memcpy(block, panel + layout.scales(k) + r * kScaleBytes, kScaleBytes);
  for (int64_t j = 0; j < row_bytes(dtype, kQuantBlockElements) - kScaleBytes; ++j) {
    block[kScaleBytes + j] = panel[layout.quants(k) + block_quant_offset(r, j)];
  }
}

}  // namespace kvlab
