#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace kvlab::tok {

ByteLevelAlphabet::ByteLevelAlphabet() {
  to_byte_.fill(-1);
  char32_t next_free = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    to_char_[b] = printable ? static_cast<char32_t>(b) : next_free++;
    to_byte_[to_char_[b]] = static_cast<int16_t>(b);
  }
}

int ByteLevelAlphabet::byte(char32_t character) const {
  return character < to_byte_.size() ? to_byte_[character] : -1;
}

std::string ByteLevelAlphabet::encode(std::string_view bytes) const {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) append_utf8(out, to_char_[static_cast<uint8_t>(c)]);
  return out;
}

}  // namespace kvlab::tok
