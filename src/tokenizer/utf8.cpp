#include "tokenizer/utf8.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "spec/spec_error.h"

namespace kvlab::tok {
namespace {

// Scans the sequence starting at text[i] (Unicode Table 3-7). Returns its length when it is
// well-formed (*valid = true); else the length of its maximal subpart, the bytes a WHATWG
// decoder replaces by one U+FFFD (*valid = false).
size_t scan_sequence(std::string_view text, size_t i, bool* valid) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(text[k]); };
  const uint8_t b0 = byte(i);
  *valid = b0 < 0x80;
  if (*valid) return 1;
  size_t n = 0;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
  } else {
    return 1;
  }
  size_t k = 1;
  for (; k < n && i + k < text.size(); ++k) {
    const uint8_t b = byte(i + k);
    if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) break;
  }
  *valid = k == n;
  return k;
}

}  // namespace

size_t first_invalid_utf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    bool valid = false;
    const size_t n = scan_sequence(text, i, &valid);
    if (!valid) return i;
    i += n;
  }
  return std::string_view::npos;
}

void check_utf8(std::string_view text, const std::string& what) {
  const size_t bad = first_invalid_utf8(text);
  if (bad != std::string_view::npos) {
    throw SpecError("text", what + " is not valid UTF-8 (byte " + std::to_string(bad) + " of " +
                                std::to_string(text.size()) + ")");
  }
}

char32_t code_point_at(std::string_view text, size_t offset, size_t* length) {
  const auto b = [&](size_t k) { return static_cast<char32_t>(static_cast<uint8_t>(text[k])); };
  const char32_t b0 = b(offset);
  if (b0 < 0x80) {
    *length = 1;
    return b0;
  }
  if (b0 < 0xE0) {
    *length = 2;
    return ((b0 & 0x1F) << 6) | (b(offset + 1) & 0x3F);
  }
  if (b0 < 0xF0) {
    *length = 3;
    return ((b0 & 0x0F) << 12) | ((b(offset + 1) & 0x3F) << 6) | (b(offset + 2) & 0x3F);
  }
  *length = 4;
  return ((b0 & 0x07) << 18) | ((b(offset + 1) & 0x3F) << 12) | ((b(offset + 2) & 0x3F) << 6) |
         (b(offset + 3) & 0x3F);
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

std::string utf8_with_replacement(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    bool valid = false;
    const size_t n = scan_sequence(bytes, i, &valid);
    if (valid) {
      out.append(bytes.substr(i, n));
    } else {
      out += "\xEF\xBF\xBD";
    }
    i += n;
  }
  return out;
}

bool is_js_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000 || c == 0xFEFF;
}

std::string_view trim_start(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    size_t n = 0;
    if (!is_js_whitespace(code_point_at(text, i, &n))) break;
    i += n;
  }
  return text.substr(i);
}

std::string_view trim_end(std::string_view text) {
  size_t end = text.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
    size_t n = 0;
    if (!is_js_whitespace(code_point_at(text, start, &n))) break;
    end = start;
  }
  return text.substr(0, end);
}

std::string nfc(std::string_view text) {
  utf8proc_uint8_t* composed = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &composed,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(composed, &std::free);
  if (n < 0) {
    throw SpecError("text", std::string("NFC normalization failed: ") + utf8proc_errmsg(n));
  }
  return std::string(reinterpret_cast<const char*>(composed), static_cast<size_t>(n));
}

}  // namespace kvlab::tok
