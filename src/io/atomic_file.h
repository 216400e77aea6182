#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kvlab {

// Writes `bytes` to `path` atomically: a temporary file in the same folder, fsync, then
// rename over the target. A crash or a full disk leaves the old file (or none), never a
// half-written one. Throws std::runtime_error naming the path and the system error.
void write_file_atomic(const std::string& path, std::string_view bytes);

// Appends `line` and a newline to `path` (created if missing) with one write(2) on an O_APPEND
// descriptor, then fsync: processes appending to one file never interleave within a line, and a
// crash leaves every earlier line whole. Throws std::runtime_error naming the path.
void append_line(const std::string& path, std::string_view line);

// Reads a whole file of at most `max_bytes`; throws std::runtime_error naming the path when it
// cannot, when it is a directory, or when it holds more (a regular file's size is checked before
// anything is read; a pipe or device is read until the limit, so /dev/zero ends too).
std::string read_file(const std::string& path, uint64_t max_bytes);

}  // namespace kvlab
