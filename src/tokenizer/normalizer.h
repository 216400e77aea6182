#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace kvlab::tok {

// tokenizer.json's "normalizer": text -> text before pre-tokenization. Types read: NFC,
// Prepend, Replace, Sequence (anything else is refused by name).
class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string normalize(std::string text) const = 0;
};

// null -> nullptr (no normalization).
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& config, const std::string& where);

}  // namespace kvlab::tok
