#include "tokenizer/pre_tokenizer.h"

#include <optional>

#include "spec/spec_error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/component_json.h"
#include "tokenizer/regex.h"

namespace kvlab::tok {
namespace {

using nlohmann::json;

// GPT-2's split, which ByteLevel applies itself when its use_regex is true.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class Split final : public PreTokenizer {
 public:
  Split(Regex pattern, bool keep_matches)
      : pattern_(std::move(pattern)), keep_matches_(keep_matches) {}

  void split(const std::string& piece, std::vector<std::string>& out) const override {
    size_t copied = 0;
    for (const auto& [begin, end] : pattern_.find_all(piece)) {
      if (begin > copied) out.push_back(piece.substr(copied, begin - copied));
      if (keep_matches_ && end > begin) out.push_back(piece.substr(begin, end - begin));
      copied = end;
    }
    if (copied < piece.size()) out.push_back(piece.substr(copied));
  }

 private:
  Regex pattern_;
  bool keep_matches_;  // "Isolated": matches are pieces of their own; "Removed": dropped
};

class ByteLevel final : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, std::optional<Regex> gpt2_split)
      : add_prefix_space_(add_prefix_space), gpt2_split_(std::move(gpt2_split)) {}

  void split(const std::string& piece, std::vector<std::string>& out) const override {
    const std::string text = add_prefix_space_ && piece.rfind(' ', 0) != 0 ? " " + piece : piece;
    if (!gpt2_split_) {
      out.push_back(alphabet_.encode(text));
      return;
    }
    for (const auto& [begin, end] : gpt2_split_->find_all(text)) {
      if (end > begin)
        out.push_back(alphabet_.encode(std::string_view(text).substr(begin, end - begin)));
    }
  }

 private:
  bool add_prefix_space_;
  std::optional<Regex> gpt2_split_;
  ByteLevelAlphabet alphabet_;
};

class PreTokenizerSequence final : public PreTokenizer {
 public:
  explicit PreTokenizerSequence(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  void split(const std::string& piece, std::vector<std::string>& out) const override {
    std::vector<std::string> pieces{piece};
    for (const auto& step : steps_) {
      std::vector<std::string> next;
      for (const std::string& p : pieces) step->split(p, next);
      pieces = std::move(next);
    }
    for (std::string& p : pieces) out.push_back(std::move(p));
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

std::unique_ptr<PreTokenizer> split_from(const json& config, const std::string& where) {
  check_members(config, {"type", "pattern", "behavior", "invert"}, where);
  const std::string behavior = string_member(config, "behavior", where);
  if (behavior != "Isolated" && behavior != "Removed") {
    throw SpecError(where + ".behavior",
                    "'" + behavior + "' is not supported (kvlab reads: Isolated, Removed)");
  }
  if (bool_member_or(config, "invert", false, where)) {
    throw SpecError(where + ".invert", "true is not supported (kvlab reads: false)");
  }
  return std::make_unique<Split>(read_pattern(config, where), behavior == "Isolated");
}

std::unique_ptr<PreTokenizer> byte_level_from(const json& config, const std::string& where) {
  // trim_offsets changes offsets only, which kvlab does not report.
  check_members(config, {"type", "add_prefix_space", "trim_offsets", "use_regex"}, where);
  std::optional<Regex> gpt2;
  if (bool_member_or(config, "use_regex", true, where)) gpt2.emplace(kGpt2Pattern, where);
  return std::make_unique<ByteLevel>(bool_member_or(config, "add_prefix_space", false, where),
                                     std::move(gpt2));
}

std::unique_ptr<PreTokenizer> pre_tokenizer_sequence_from(const json& config,
                                                          const std::string& where) {
  check_members(config, {"type", "pretokenizers"}, where);
  auto steps = read_steps<PreTokenizer>(config, "pretokenizers", where, &make_pre_tokenizer);
  return std::make_unique<PreTokenizerSequence>(std::move(steps));
}

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& config, const std::string& where) {
  if (config.is_null()) return nullptr;
  static const ComponentFactories<PreTokenizer> factories = {
      {"ByteLevel", &byte_level_from},
      {"Sequence", &pre_tokenizer_sequence_from},
      {"Split", &split_from},
  };
  return build_component(factories, config, where);
}

}  // namespace kvlab::tok
