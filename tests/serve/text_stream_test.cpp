// Streamed text: stop strings across tokens, held-back prefixes, incomplete UTF-8.
#include "serve/text_stream.h"

#include <gtest/gtest.h>

#include <random>

#include "tokenizer/utf8.h"

namespace kvlab::serve {
namespace {

// byte tokens, decoded as the server decodes a byte model's
std::string decode_bytes(std::span<const int32_t> ids) {
  return tok::utf8_with_replacement(std::string(ids.begin(), ids.end()));
}

// The pieces a stream returns for text fed a byte at a time, and the end.
std::vector<std::string> feed(const std::string& text, std::vector<std::string> stop) {
  TextStream s(decode_bytes, std::move(stop));
  std::vector<std::string> pieces;
  for (const unsigned char c : text) pieces.push_back(s.push(c));
  pieces.push_back(s.finish());
  return pieces;
}

std::string joined(const std::vector<std::string>& pieces) {
  std::string out;
  for (const std::string& p : pieces) out += p;
  return out;
}

TEST(TextStreamTest, StopStringsEndTheTextBeforeThem) {
  EXPECT_EQ(joined(feed("hello world. more", {"."})), "hello world");
  EXPECT_EQ(joined(feed("hello world. more", {"wor", "o"})), "hell");  // the first to appear
  EXPECT_EQ(joined(feed("abcabd", {"abd"})), "abc");  // a false start, then the stop string
  EXPECT_EQ(joined(feed("ab", {"abc"})), "ab");       // a prefix at the end is text after all
  EXPECT_EQ(joined(feed("stop", {"stop"})), "");
  EXPECT_EQ(joined(feed("no stops here", {})), "no stops here");
  // held back while it may begin a stop string, released when it cannot
  const std::vector<std::string> pieces = feed("xa-b", {"a-c"});
  EXPECT_EQ(pieces, (std::vector<std::string>{"x", "", "", "a-b", ""}));
  // the brute-force oracle: for random texts and stops, the text before the first occurrence
  std::mt19937 rng(5);
  for (int trial = 0; trial < 500; ++trial) {
    std::string text, stop;
    for (int i = 0; i < 12; ++i) text += "ab"[rng() % 2];
    for (int i = 1 + static_cast<int>(rng() % 3); i > 0; --i) stop += "ab"[rng() % 2];
    const std::string got = joined(feed(text, {stop}));
    const size_t at = text.find(stop);
    EXPECT_EQ(got, at == std::string::npos ? text : text.substr(0, at)) << text << " / " << stop;
  }
}

TEST(TextStreamTest, IncompleteCharactersWaitForTheirLastByte) {
  const std::string snowman = "\xe2\x98\x83";  // U+2603, three bytes
  const std::vector<std::string> pieces = feed("a" + snowman + "b", {});
  EXPECT_EQ(pieces, (std::vector<std::string>{"a", "", "", snowman, "b", ""}));
  // a character that never completes becomes U+FFFD at the end
  EXPECT_EQ(joined(feed("a\xe2\x98", {})), "a\xEF\xBF\xBD");
  // a stop string after a multi-byte character
  EXPECT_EQ(joined(feed(snowman + "!x", {"!"})), snowman);
}

}  // namespace
}  // namespace kvlab::serve
