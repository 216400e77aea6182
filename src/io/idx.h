#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvlab {

// The dimensions of an IDX file of unsigned bytes with `dims` dimensions (the MNIST format:
// magic 0x0000080D, D big-endian 32-bit sizes, then the payload), after checking that the
// payload holds exactly their product of bytes. Throws SpecError("data") naming `path`.
std::vector<int64_t> parse_idx_header(std::string_view bytes, int dims, const std::string& path);

}  // namespace kvlab
