#include "tokenizer/normalizer.h"

#include <vector>

#include "spec/spec_error.h"
#include "tokenizer/component_json.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace kvlab::tok {
namespace {

using nlohmann::json;

class Nfc final : public Normalizer {
 public:
  std::string normalize(std::string text) const override { return nfc(text); }
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string normalize(std::string text) const override { return prefix_ + text; }

 private:
  std::string prefix_;
};

class Replace final : public Normalizer {
 public:
  Replace(Regex pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  std::string normalize(std::string text) const override {
    return replace_all(text, pattern_, content_);
  }

 private:
  Regex pattern_;
  std::string content_;
};

class NormalizerSequence final : public Normalizer {
 public:
  explicit NormalizerSequence(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  std::string normalize(std::string text) const override {
    for (const auto& step : steps_) text = step->normalize(std::move(text));
    return text;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

std::unique_ptr<Normalizer> nfc_from(const json& config, const std::string& where) {
  check_members(config, {"type"}, where);
  return std::make_unique<Nfc>();
}

std::unique_ptr<Normalizer> prepend_from(const json& config, const std::string& where) {
  check_members(config, {"type", "prepend"}, where);
  return std::make_unique<Prepend>(string_member(config, "prepend", where));
}

std::unique_ptr<Normalizer> replace_from(const json& config, const std::string& where) {
  check_members(config, {"type", "pattern", "content"}, where);
  return std::make_unique<Replace>(read_pattern(config, where),
                                   string_member(config, "content", where));
}

std::unique_ptr<Normalizer> normalizer_sequence_from(const json& config, const std::string& where) {
  check_members(config, {"type", "normalizers"}, where);
  auto steps = read_steps<Normalizer>(config, "normalizers", where, &make_normalizer);
  return std::make_unique<NormalizerSequence>(std::move(steps));
}

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const json& config, const std::string& where) {
  if (config.is_null()) return nullptr;
  static const ComponentFactories<Normalizer> factories = {
      {"NFC", &nfc_from},
      {"Prepend", &prepend_from},
      {"Replace", &replace_from},
      {"Sequence", &normalizer_sequence_from},
  };
  return build_component(factories, config, where);
}

}  // namespace kvlab::tok
