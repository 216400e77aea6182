#include "io/idx.h"

#include <cstdio>

#include "spec/spec_error.h"

namespace kvlab {
namespace {

uint32_t big_endian(std::string_view bytes, size_t offset) {
  const auto* b = reinterpret_cast<const unsigned char*>(bytes.data() + offset);
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
}

}  // namespace

std::vector<int64_t> parse_idx_header(std::string_view bytes, int dims, const std::string& path) {
  const size_t header = 4 + 4 * static_cast<size_t>(dims);
  if (bytes.size() < header) throw SpecError("data", path + ": shorter than an IDX header");
  const uint32_t magic = big_endian(bytes, 0);
  const uint32_t expected = 0x00000800u | static_cast<uint32_t>(dims);
  if (magic != expected) {
    char text[96];
    std::snprintf(text, sizeof text, ": IDX magic 0x%08x, expected 0x%08x (unsigned bytes, %d-d)",
                  magic, expected, dims);
    throw SpecError("data", path + text);
  }
  std::vector<int64_t> shape;
  // the product of the sizes, overflow-checked, must be the payload before it is trusted
  uint64_t count = 1;
  bool overflow = false;
  for (int d = 0; d < dims; ++d) {
    shape.push_back(big_endian(bytes, 4 + 4 * static_cast<size_t>(d)));
    overflow |= __builtin_mul_overflow(count, static_cast<uint64_t>(shape.back()), &count);
  }
  if (overflow || count != bytes.size() - header) {
    throw SpecError("data", path + ": header promises " +
                                (overflow ? std::string("more than 2^64") : std::to_string(count)) +
                                " bytes of data, the file holds " +
                                std::to_string(bytes.size() - header));
  }
  return shape;
}

}  // namespace kvlab
