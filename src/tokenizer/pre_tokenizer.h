#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvlab::tok {

// tokenizer.json's "pre_tokenizer": splits normalized text into the pieces BPE encodes one by
// one. Types read: Split (Isolated or Removed), ByteLevel, Sequence.
class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Appends the pieces of `piece` to `out` (valid UTF-8 in, valid UTF-8 out).
  virtual void split(const std::string& piece, std::vector<std::string>& out) const = 0;
};

// null -> nullptr (the whole text is one piece).
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& config,
                                                 const std::string& where);

}  // namespace kvlab::tok
