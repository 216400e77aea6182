#pragma once

#include <string>
#include <string_view>

namespace kvlab {

// Writes `bytes` to `path` atomically: a temporary file in the same folder, fsync, then
// rename over the target. A crash or a full disk leaves the old file (or none), never a
// half-written one. Throws std::runtime_error naming the path and the system error.
void write_file_atomic(const std::string& path, std::string_view bytes);

// Reads a whole file; throws std::runtime_error naming the path when it cannot.
std::string read_file(const std::string& path);

}  // namespace kvlab
