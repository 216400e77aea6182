#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace kvlab {

// Limits on what kvlab accepts from a JSON file. A config is kilobytes and a few levels deep;
// anything far past that is a wrong file or an attack, and is refused before it is parsed
// (nlohmann's dump() recurses, so a deep document would overflow the stack in a message).
inline constexpr uint64_t kMaxConfigBytes = uint64_t{16} << 20;    // config.json, state files
inline constexpr uint64_t kMaxResultsBytes = uint64_t{256} << 20;  // a suite's results.json
inline constexpr int kMaxJsonDepth = 64;

// Parses `text` as one JSON document. Throws SpecError(field) whose message names `source`:
// not JSON (with the parser's position), nested deeper than kMaxJsonDepth, or a number that
// does not fit a double.
nlohmann::json parse_json_document(std::string_view text, const std::string& source,
                                   const std::string& field);

// Reads and parses a JSON file of at most `max_bytes`. Throws SpecError(field) naming the
// path for a missing file, a directory, an oversized file or bad JSON.
nlohmann::json read_json_document(const std::string& path, const std::string& field,
                                  uint64_t max_bytes = kMaxConfigBytes);

// A value as it may be echoed in a message: its JSON text, cut to `max_chars` with the
// number of characters left out.
std::string json_excerpt(const nlohmann::json& value, size_t max_chars = 80);
// User text as it may be echoed in a message, cut the same way.
std::string text_excerpt(std::string_view text, size_t max_chars = 80);

}  // namespace kvlab
