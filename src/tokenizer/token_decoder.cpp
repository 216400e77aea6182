#include "tokenizer/token_decoder.h"

#include "spec/spec_error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/component_json.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace kvlab::tok {
namespace {

using nlohmann::json;

class ByteLevelDecoder final : public TokenDecoder {
 public:
  explicit ByteLevelDecoder(std::set<std::string> added) : added_(std::move(added)) {}

  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    const auto flush = [&] {
      if (!bytes.empty()) out.push_back(utf8_with_replacement(bytes));
      bytes.clear();
    };
    for (std::string& token : tokens) {
      if (added_.count(token) != 0) {
        flush();
        out.push_back(std::move(token));
        continue;
      }
      for (size_t i = 0; i < token.size();) {
        size_t n = 0;
        const char32_t c = code_point_at(token, i, &n);
        const int byte = alphabet_.byte(c);
        // A character outside the byte alphabet (none in a well-formed vocabulary) stays text.
        if (byte >= 0) {
          bytes += static_cast<char>(byte);
        } else {
          bytes.append(token, i, n);
        }
        i += n;
      }
    }
    flush();
    return out;
  }

 private:
  std::set<std::string> added_;
  ByteLevelAlphabet alphabet_;
};

// "<0xHH>" tokens are bytes; runs of them become text (invalid UTF-8 replaced by U+FFFD).
class ByteFallbackDecoder final : public TokenDecoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    for (std::string& token : tokens) {
      const int byte = byte_token(token);
      if (byte >= 0) {
        bytes += static_cast<char>(byte);
        continue;
      }
      if (!bytes.empty()) out.push_back(utf8_with_replacement(bytes));
      bytes.clear();
      out.push_back(std::move(token));
    }
    if (!bytes.empty()) out.push_back(utf8_with_replacement(bytes));
    return out;
  }

 private:
  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  }
  static int byte_token(const std::string& t) {
    if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
    const int hi = hex(t[3]), lo = hex(t[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
  }
};

class FuseDecoder final : public TokenDecoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::string joined;
    for (const std::string& t : tokens) joined += t;
    return {joined};
  }
};

class ReplaceDecoder final : public TokenDecoder {
 public:
  ReplaceDecoder(Regex pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (std::string& t : tokens) t = replace_all(t, pattern_, content_);
    return tokens;
  }

 private:
  Regex pattern_;
  std::string content_;
};

// Removes up to `start` leading and `stop` trailing copies of one character from each token.
class StripDecoder final : public TokenDecoder {
 public:
  StripDecoder(std::string content, int64_t start, int64_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    const size_t n = content_.size();
    for (std::string& t : tokens) {
      size_t begin = 0, end = t.size();
      for (int64_t i = 0; i < start_ && end - begin >= n && t.compare(begin, n, content_) == 0;
           ++i) {
        begin += n;
      }
      for (int64_t i = 0; i < stop_ && end - begin >= n && t.compare(end - n, n, content_) == 0;
           ++i) {
        end -= n;
      }
      t = t.substr(begin, end - begin);
    }
    return tokens;
  }

 private:
  std::string content_;
  int64_t start_, stop_;
};

class SequenceDecoder final : public TokenDecoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<TokenDecoder>> steps)
      : steps_(std::move(steps)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (const auto& step : steps_) tokens = step->decode_chain(std::move(tokens));
    return tokens;
  }

 private:
  std::vector<std::unique_ptr<TokenDecoder>> steps_;
};

int64_t count_member(const json& config, const char* key, const std::string& where) {
  const json& value = member(config, key, where);
  if (!value.is_number_integer() || value.get<int64_t>() < 0) {
    throw SpecError(where + "." + key, "expected a non-negative integer");
  }
  return value.get<int64_t>();
}

}  // namespace

std::unique_ptr<TokenDecoder> make_token_decoder(const json& config, const std::string& where,
                                                 const std::set<std::string>& added_tokens) {
  if (config.is_null()) return nullptr;
  const std::string type = component_type(config, where);
  if (type == "ByteLevel") {
    check_members(config, {"type", "add_prefix_space", "trim_offsets", "use_regex"}, where);
    return std::make_unique<ByteLevelDecoder>(added_tokens);
  }
  if (type == "ByteFallback" || type == "Fuse") {
    check_members(config, {"type"}, where);
    if (type == "Fuse") return std::make_unique<FuseDecoder>();
    return std::make_unique<ByteFallbackDecoder>();
  }
  if (type == "Replace") {
    check_members(config, {"type", "pattern", "content"}, where);
    return std::make_unique<ReplaceDecoder>(read_pattern(config, where),
                                            string_member(config, "content", where));
  }
  if (type == "Strip") {
    check_members(config, {"type", "content", "start", "stop"}, where);
    const std::string content = string_member(config, "content", where);
    if (content.empty()) throw SpecError(where + ".content", "must not be empty");
    return std::make_unique<StripDecoder>(content, count_member(config, "start", where),
                                          count_member(config, "stop", where));
  }
  if (type == "Sequence") {
    check_members(config, {"type", "decoders"}, where);
    auto steps = read_steps<TokenDecoder>(
        config, "decoders", where, [&](const json& step, const std::string& step_where) {
          return make_token_decoder(step, step_where, added_tokens);
        });
    return std::make_unique<SequenceDecoder>(std::move(steps));
  }
  throw_unsupported_type(type, "ByteFallback, ByteLevel, Fuse, Replace, Sequence, Strip", where);
  return nullptr;
}

}  // namespace kvlab::tok
