#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvlab::tok {

// The byte offset of the first byte that breaks UTF-8 (overlong forms, surrogates and code
// points past U+10FFFF included), or npos when `text` is valid.
size_t first_invalid_utf8(std::string_view text);
// Throws SpecError("text") naming the offset when `text` is not valid UTF-8.
void check_utf8(std::string_view text, const std::string& what);

// The code point at `offset` of valid UTF-8 and its length in bytes.
char32_t code_point_at(std::string_view text, size_t offset, size_t* length);
void append_utf8(std::string& out, char32_t code_point);

// Bytes -> text the way a WHATWG TextDecoder does (what transformers and transformers.js do
// when tokens end inside a character): each maximal invalid subsequence becomes U+FFFD.
std::string utf8_with_replacement(std::string_view bytes);

// ECMAScript's whitespace (WhiteSpace and LineTerminator: what String.prototype.trim removes),
// used to strip around added tokens that ask for it.
bool is_js_whitespace(char32_t code_point);
std::string_view trim_start(std::string_view text);
std::string_view trim_end(std::string_view text);

// Canonical composition (Unicode NFC), by utf8proc.
std::string nfc(std::string_view text);

}  // namespace kvlab::tok
