#include "io/json_document.h"

#include <stdexcept>

#include "io/atomic_file.h"
#include "spec/spec_error.h"

namespace kvlab {
namespace {

using nlohmann::json;

// The deepest nesting of arrays and objects in `text`, outside strings; stops counting once
// past `limit`.
int nesting_depth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

json parse_json_document(std::string_view text, const std::string& source,
                         const std::string& field) {
  if (nesting_depth(text, kMaxJsonDepth) > kMaxJsonDepth) {
    throw SpecError(field, source + " nests arrays or objects more than " +
                               std::to_string(kMaxJsonDepth) + " levels deep");
  }
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    throw SpecError(field, source + " is not valid JSON: " + e.what());
  } catch (const json::exception& e) {
    // out_of_range 406: a number too large for a double
    throw SpecError(field, source + " holds a value kvlab cannot read: " + e.what());
  }
}

json read_json_document(const std::string& path, const std::string& field, uint64_t max_bytes) {
  std::string text;
  try {
    text = read_file(path, max_bytes);
  } catch (const std::runtime_error& e) {
    throw SpecError(field, e.what());
  }
  return parse_json_document(text, path, field);
}

std::string text_excerpt(std::string_view text, size_t max_chars) {
  if (text.size() <= max_chars) return std::string(text);
  size_t cut = max_chars;
  // do not split a UTF-8 sequence
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return std::string(text.substr(0, cut)) + "… (" + std::to_string(text.size() - cut) +
         " more bytes)";
}

std::string json_excerpt(const json& value, size_t max_chars) {
  return text_excerpt(value.dump(-1, ' ', false, json::error_handler_t::replace), max_chars);
}

}  // namespace kvlab
