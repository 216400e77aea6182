#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvlab::tok {

// GPT-2's reversible byte <-> character map: printable Latin-1 bytes stand for themselves, the
// other 68 bytes for U+0100.. in byte order, so every byte string is a string of visible
// characters and BPE can work on bytes.
class ByteLevelAlphabet {
 public:
  ByteLevelAlphabet();
  char32_t character(uint8_t byte) const { return to_char_[byte]; }
  // The byte a character stands for, or -1 for a character outside the alphabet.
  int byte(char32_t character) const;
  // Every byte of `bytes` as its character, UTF-8 encoded.
  std::string encode(std::string_view bytes) const;

 private:
  std::array<char32_t, 256> to_char_{};
  std::array<int16_t, 324> to_byte_{};  // indexed by code point; the map's largest is U+0143
};

}  // namespace kvlab::tok
