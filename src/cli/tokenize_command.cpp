#include "cli/tokenize_command.h"

#include <charconv>
#include <iterator>
#include <vector>

#include "io/atomic_file.h"
#include "io/json_document.h"
#include "spec/spec_error.h"
#include "tokenizer/tokenizer.h"

namespace kvlab {
namespace {

// Stdin is read whole; past this it is not text to inspect by hand.
constexpr size_t kMaxInputBytes = size_t{1} << 30;

std::string read_all(std::istream& in) {
  std::string text;
  char buffer[1 << 16];
  while (in.read(buffer, sizeof(buffer)) || in.gcount() > 0) {
    text.append(buffer, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxInputBytes) {
      throw SpecError("stdin",
                      "more than " + std::to_string(kMaxInputBytes >> 20) + " MiB of input");
    }
  }
  return text;
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    if (std::isspace(static_cast<unsigned char>(text[i]))) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < text.size() && !std::isspace(static_cast<unsigned char>(text[end]))) ++end;
    const std::string_view word(text.data() + i, end - i);
    int32_t id = 0;
    const auto [ptr, ec] = std::from_chars(word.data(), word.data() + word.size(), id);
    if (ec != std::errc() || ptr != word.data() + word.size() || id < 0) {
      throw SpecError("ids", "'" + text_excerpt(word) + "' (word " +
                                 std::to_string(ids.size() + 1) +
                                 ") is not a token id (a non-negative integer)");
    }
    ids.push_back(id);
    i = end;
  }
  return ids;
}

// A token's text for one line of --tokens: control characters and the separator escaped.
std::string printable(const std::string& text) {
  std::string out;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '\\') {
      out += "\\\\";
    } else if (byte < 0x20 || byte == 0x7F) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\x%02X", byte);
      out += escaped;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

CLI::App* add_tokenize_command(CLI::App& app, TokenizeOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "tokenize",
      "Encode text from stdin with a Hugging Face tokenizer.json (byte-level BPE as in GPT-2, "
      "Llama 3, Qwen, DeepSeek; SentencePiece-style BPE as in Llama 2, Mistral) and print the "
      "ids on one line, space-separated; or decode ids from stdin back to text.\n"
      "  echo 'Hello world' | kvlab tokenize --tokenizer path/to/model\n"
      "  echo '9906 1917' | kvlab tokenize --tokenizer path/to/model --decode");
  cmd->add_option("--tokenizer", o.tokenizer,
                  "tokenizer.json, or a model folder holding it (its tokenizer_config.json is read "
                  "for the BOS/EOS tokens)")
      ->required();
  cmd->add_option("--input", o.input,
                  "Read the text (or with --decode the ids) from this file "
                  "instead of stdin");
  auto* ids = cmd->add_flag("--ids", o.ids, "print the ids of the text (the default)");
  auto* tokens = cmd->add_flag("--tokens", o.tokens,
                               "print one line per token: id, the vocabulary's string, the text it "
                               "decodes to (tab-separated)");
  auto* decode =
      cmd->add_flag("--decode", o.decode, "read ids (whitespace-separated), print the text");
  ids->excludes(tokens)->excludes(decode);
  tokens->excludes(decode);
  cmd->add_flag("--add-special-tokens", o.add_special_tokens,
                "add the BOS/EOS tokens the model expects around a text (off: the text's own ids)");
  cmd->add_flag("--skip-special-tokens", o.skip_special_tokens,
                "with --decode: leave special tokens out of the text");
  return cmd;
}

int run_tokenize(const TokenizeOptions& o, std::istream& in, std::ostream& out) {
  if (o.skip_special_tokens && !o.decode) {
    throw SpecError("--skip-special-tokens", "applies only with --decode");
  }
  if (o.add_special_tokens && o.decode) {
    throw SpecError("--add-special-tokens", "applies only when encoding (not with --decode)");
  }
  const tok::Tokenizer tokenizer = tok::Tokenizer::load(o.tokenizer);
  std::string input;
  if (o.input.empty()) {
    input = read_all(in);
  } else {
    try {
      input = read_file(o.input, kMaxInputBytes);
    } catch (const std::runtime_error& e) {
      throw SpecError("input", e.what());
    }
  }
  if (o.decode) {
    const std::vector<int32_t> ids = parse_ids(input);
    out << tokenizer.decode(ids, o.skip_special_tokens);
    return 0;
  }
  const std::vector<int32_t> ids = tokenizer.encode(input, o.add_special_tokens);
  if (o.tokens) {
    for (const int32_t id : ids) {
      const int32_t one[] = {id};
      out << id << '\t' << printable(*tokenizer.token(id)) << '\t'
          << printable(tokenizer.decode(one)) << '\n';
    }
    return 0;
  }
  for (size_t i = 0; i < ids.size(); ++i) out << (i == 0 ? "" : " ") << ids[i];
  out << '\n';
  return 0;
}

}  // namespace kvlab
