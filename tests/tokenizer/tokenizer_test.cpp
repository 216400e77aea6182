// The tokenizer's stages on small hand-written tokenizer.json files whose results are worked
// out by hand, and its refusals of what it does not implement.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "spec/spec_error.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tiny_tokenizers.h"
#include "tokenizer/utf8.h"

namespace kvlab::tok {
namespace {

using nlohmann::json;

// Byte-level BPE: ids 0..255 are the bytes (as GPT-2 characters), then
// ab=256, bc=257, abc=258, aa=259; merges by rank: b+c, a+b, a+bc, a+a.
json byte_level_tokenizer() {
  const ByteLevelAlphabet alphabet;
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[alphabet.encode(std::string(1, static_cast<char>(b)))] = b;
  vocab["ab"] = 256;
  vocab["bc"] = 257;
  vocab["abc"] = 258;
  vocab["aa"] = 259;
  return {
      {"version", "1.0"},
      {"added_tokens", json::array({{{"id", 260}, {"content", "<|end|>"}, {"special", true}},
                                    {{"id", 261}, {"content", "<|end|>x"}, {"special", false}},
                                    {{"id", 262},
                                     {"content", "<pad>"},
                                     {"special", true},
                                     {"lstrip", true},
                                     {"rstrip", true}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", {{"type", "ByteLevel"}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"vocab", vocab},
        {"merges", json::array({"b c", "a b", json::array({"a", "bc"}), "a a"})}}}};
}

Tokenizer make(const json& tokenizer, const json& config = json::object()) {
  return Tokenizer::parse(tokenizer.dump(), config.dump(), "test tokenizer.json");
}

std::vector<int32_t> ids(std::initializer_list<int32_t> list) { return list; }

TEST(ByteLevelAlphabetTest, IsABijectionThatKeepsPrintableBytes) {
  const ByteLevelAlphabet alphabet;
  std::set<char32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const char32_t c = alphabet.character(static_cast<uint8_t>(b));
    EXPECT_TRUE(seen.insert(c).second) << b;
    EXPECT_EQ(alphabet.byte(c), b);
  }
  EXPECT_EQ(alphabet.character('A'), U'A');
  EXPECT_EQ(alphabet.character(0), U'\u0100');    // the first non-printable byte
  EXPECT_EQ(alphabet.character(' '), U'\u0120');  // GPT-2's "Ġ"
  EXPECT_EQ(alphabet.byte(U'\u4E00'), -1);
}

TEST(Utf8Test, ValidationAndReplacementFollowUnicodeAndWhatwg) {
  EXPECT_EQ(first_invalid_utf8("abc \xE2\x96\x81 \xF0\x9F\x98\x80"), std::string_view::npos);
  EXPECT_EQ(first_invalid_utf8("ab\xC0\x80"), 2u);        // overlong
  EXPECT_EQ(first_invalid_utf8("a\xED\xA0\x80"), 1u);     // surrogate
  EXPECT_EQ(first_invalid_utf8("\xF4\x90\x80\x80"), 0u);  // past U+10FFFF
  EXPECT_EQ(first_invalid_utf8("ok\xF0\x9F\x98"), 2u);    // truncated
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8_with_replacement("a\xF0\x9F\x98"
                                  "b"),
            "a" + fffd + "b");  // one maximal subpart
  EXPECT_EQ(utf8_with_replacement("\xC0\x80"), fffd + fffd);
  EXPECT_EQ(utf8_with_replacement("\xED\xA0\x80"), fffd + fffd + fffd);
  EXPECT_EQ(trim_end(" a\xE3\x80\x80 \t"), " a");
  EXPECT_EQ(trim_start("\xEF\xBB\xBF\n a "), "a ");
  EXPECT_EQ(nfc("e\xCC\x81"), "\xC3\xA9");
  EXPECT_EQ(nfc(std::string("a\0b", 3)), std::string("a\0b", 3));  // NUL is text, not the end
  EXPECT_THROW(check_utf8("\xFF", "input"), SpecError);
}

TEST(AddedTokenSplitterTest, LongestMatchAtTheLeftmostPosition) {
  const AddedTokenSplitter splitter({{1, "<a>", true}, {2, "<a>b", true}, {3, "b<", false}});
  const auto sections = splitter.split("x<a>b<a>yb<");
  std::vector<std::string> texts;
  for (const auto& s : sections) texts.emplace_back(s.text);
  EXPECT_EQ(texts, (std::vector<std::string>{"x", "<a>b", "<a>", "y", "b<"}));
  EXPECT_EQ(sections[0].token, nullptr);
  EXPECT_EQ(sections[1].token->id, 2);
  EXPECT_EQ(sections[2].token->id, 1);
  EXPECT_EQ(sections[4].token->id, 3);
}

TEST(TokenizerTest, ByteLevelMergesLowestRankFirstAndLeftmostAmongEquals) {
  const Tokenizer t = make(byte_level_tokenizer());
  EXPECT_EQ(t.encode("abc"), ids({258}));  // b+c (rank 0) before a+b (rank 1), then a+bc
  EXPECT_EQ(t.encode("abab"), ids({256, 256}));
  EXPECT_EQ(t.encode("aaa"), ids({259, 'a'}));  // the leftmost a+a wins the tie
  EXPECT_EQ(t.encode("cab"), ids({'c', 256}));
  // GPT-2's split: "ab", " c" (the space is byte 32, "Ġ"), "!!"
  EXPECT_EQ(t.encode("ab c!!"), ids({256, ' ', 'c', '!', '!'}));
  EXPECT_EQ(t.decode(t.encode("ab c!!")), "ab c!!");
  EXPECT_EQ(t.encode("\xC3\xA9"), ids({0xC3, 0xA9}));  // every byte is a token
  EXPECT_EQ(t.encode(""), ids({}));
  EXPECT_EQ(t.vocab_size(), 263);
}

TEST(TokenizerTest, AddedTokensSplitFirstAndStripWhereAsked) {
  const Tokenizer t = make(byte_level_tokenizer());
  EXPECT_EQ(t.encode("ab<|end|>ab"), ids({256, 260, 256}));
  EXPECT_EQ(t.encode("<|end|>x"), ids({261}));                 // the longer added token
  EXPECT_EQ(t.encode("ab  <pad>  ab"), ids({256, 262, 256}));  // lstrip and rstrip
  EXPECT_EQ(t.decode(ids({256, 260, 256})), "ab<|end|>ab");
  EXPECT_EQ(t.decode(ids({256, 260, 256}), true), "abab");  // special skipped
  // A byte sequence cut inside a character decodes to U+FFFD, as transformers does.
  EXPECT_EQ(t.decode(ids({0xC3})), "\xEF\xBF\xBD");
}

TEST(TokenizerTest, SentencePieceStyleWithByteFallbackAndTemplate) {
  const Tokenizer t = make(sentencepiece_tokenizer(true));
  EXPECT_EQ(t.encode("hi"), ids({263}));
  EXPECT_EQ(t.encode("hi", true), ids({1, 263}));
  EXPECT_EQ(t.encode("hi\xC3\xA9"), ids({263, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(t.encode("hi hi"), ids({263, 263}));
  EXPECT_EQ(t.decode(t.encode("hi hi\xC3\xA9")), "hi hi\xC3\xA9");
  EXPECT_EQ(t.encode("<s>hi"), ids({1, 263}));
  EXPECT_EQ(t.bos_id(), 1);
}

TEST(TokenizerTest, UnknownCharactersFuseIntoOneUnkWithoutByteFallback) {
  const Tokenizer t = make(sentencepiece_tokenizer(false));
  EXPECT_EQ(t.encode("\xC3\xA9\xC3\xA9hi"), ids({259, 0, 262}));  // ▁, é é as one <unk>, hi
}

TEST(TokenizerTest, BosAndEosFromTokenizerConfig) {
  const json config = {{"add_bos_token", true},
                       {"add_eos_token", true},
                       {"bos_token", {{"content", "<|end|>"}, {"__type", "AddedToken"}}},
                       {"eos_token", "<pad>"}};
  const Tokenizer t = make(byte_level_tokenizer(), config);
  EXPECT_EQ(t.encode("ab", true), ids({260, 256, 262}));
  EXPECT_EQ(t.encode("ab", false), ids({256}));
}

std::string refusal(const json& tokenizer, const json& config = json::object()) {
  try {
    make(tokenizer, config);
  } catch (const SpecError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(TokenizerTest, RefusesWhatItDoesNotImplementNamingTheField) {
  json t = byte_level_tokenizer();
  t["normalizer"] = {{"type", "Lowercase"}};
  EXPECT_EQ(refusal(t),
            "tokenizer: test tokenizer.json: normalizer.type: 'Lowercase' is not supported (kvlab "
            "reads: NFC, Prepend, Replace, Sequence)");
  t = byte_level_tokenizer();
  t["model"]["type"] = "WordPiece";
  EXPECT_NE(refusal(t).find("model.type: 'WordPiece' is not supported (kvlab reads: BPE)"),
            std::string::npos);
  t = byte_level_tokenizer();
  t["model"]["merges"].push_back("a zz");
  EXPECT_NE(refusal(t).find("model.merges[4]: 'zz' is not in the vocabulary"), std::string::npos);
  t = byte_level_tokenizer();
  t["model"]["merges"].push_back("abc");
  EXPECT_NE(refusal(t).find("model.merges[4]: expected \"left right\""), std::string::npos);
  t = byte_level_tokenizer();
  t["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  EXPECT_NE(refusal(t).find("pre_tokenizer.pattern: invalid regular expression at offset 9"),
            std::string::npos);
  t["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Contiguous"}};
  EXPECT_NE(refusal(t).find("pre_tokenizer.behavior: 'Contiguous' is not supported"),
            std::string::npos);
  t = byte_level_tokenizer();
  t["pre_tokenizer"]["prefix_mode"] = true;
  EXPECT_NE(
      refusal(t).find("pre_tokenizer.prefix_mode: is not an option kvlab's tokenizer understands"),
      std::string::npos);
  t = byte_level_tokenizer();
  t["model"]["dropout"] = 0.1;
  EXPECT_NE(refusal(t).find("model.dropout"), std::string::npos);
  t = byte_level_tokenizer();
  t["post_processor"] = {{"type", "BertProcessing"}};
  EXPECT_NE(refusal(t).find("post_processor.type: 'BertProcessing' is not supported"),
            std::string::npos);
  t = byte_level_tokenizer();
  t["truncation"] = {{"max_length", 8}};
  EXPECT_NE(refusal(t).find("truncation: must be null"), std::string::npos);
  EXPECT_NE(refusal(byte_level_tokenizer(), {{"bos_token", "<nope>"}})
                .find("tokenizer_config.bos_token: '<nope>' is not in the vocabulary"),
            std::string::npos);
  EXPECT_NE(refusal(json::array()).find("expected a JSON object"), std::string::npos);
}

TEST(TokenizerTest, BadTextAndBadIdsAreErrorsNotCrashes) {
  const Tokenizer t = make(byte_level_tokenizer());
  try {
    t.encode("ok\xFF");
    FAIL() << "accepted invalid UTF-8";
  } catch (const SpecError& e) {
    EXPECT_STREQ(e.what(), "text: the text to encode is not valid UTF-8 (byte 2 of 3)");
  }
  const std::vector<int32_t> bad = {1, 263};
  try {
    t.decode(bad);
    FAIL() << "decoded an id past the vocabulary";
  } catch (const SpecError& e) {
    EXPECT_NE(std::string(e.what()).find("id 263 is not in the vocabulary"), std::string::npos);
  }
  const std::vector<int32_t> negative = {-1};
  EXPECT_THROW(t.decode(negative), SpecError);
}

// The heap merge against its plain twin: repeatedly merge the adjacent pair of lowest rank,
// leftmost among equals, by scanning the whole list each time. Random merge tables (including
// one string reachable by two different merges) and random strings, seeded.
TEST(TokenizerTest, HeapMergeEqualsTheQuadraticReferenceOnRandomTables) {
  std::mt19937 rng(2026);
  for (int table = 0; table < 20; ++table) {
    std::vector<std::string> tokens = {"a", "b", "c", "d"};
    json vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"d", 3}};
    json merges = json::array();
    std::map<std::pair<std::string, std::string>, size_t> rank;
    for (int m = 0; m < 40; ++m) {
      const std::string left = tokens[rng() % tokens.size()];
      const std::string right = tokens[rng() % tokens.size()];
      if (left.size() + right.size() > 6 || rank.count({left, right}) != 0) continue;
      rank.emplace(std::make_pair(left, right), merges.size());
      merges.push_back(json::array({left, right}));
      if (!vocab.contains(left + right)) {
        vocab[left + right] = tokens.size();
        tokens.push_back(left + right);
      }
    }
    const Tokenizer t = make({{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}});
    for (int text = 0; text < 50; ++text) {
      std::string s;
      for (size_t n = rng() % 60; n > 0; --n) s += static_cast<char>('a' + rng() % 4);
      std::vector<std::string> symbols;
      for (const char c : s) symbols.emplace_back(1, c);
      for (;;) {
        size_t best = symbols.size(), best_rank = SIZE_MAX;
        for (size_t i = 0; i + 1 < symbols.size(); ++i) {
          const auto it = rank.find({symbols[i], symbols[i + 1]});
          if (it != rank.end() && it->second < best_rank) {
            best = i;
            best_rank = it->second;
          }
        }
        if (best == symbols.size()) break;
        symbols[best] += symbols[best + 1];
        symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
      }
      std::vector<int32_t> expected;
      for (const std::string& symbol : symbols) expected.push_back(vocab.at(symbol).get<int32_t>());
      ASSERT_EQ(t.encode(s), expected) << "table " << table << ", text '" << s << "'";
    }
  }
}

TEST(TokenizerTest, LongPiecesMergeInOrderNLogN) {
  // One 200,000-character piece (a SentencePiece text has no pre-tokenizer): the heap merge
  // handles it; a quadratic merge would not finish in a test's time.
  const Tokenizer t = make(sentencepiece_tokenizer(true));
  std::string text;
  for (int i = 0; i < 100000; ++i) text += "hi";
  const std::vector<int32_t> encoded = t.encode(text);
  ASSERT_EQ(encoded.size(), 100000u);
  EXPECT_EQ(encoded.front(), 263);
  EXPECT_EQ(encoded.back(), 262);
}

}  // namespace
}  // namespace kvlab::tok
