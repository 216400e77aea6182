#include "cli/text_tokens.h"

#include <filesystem>

#include "spec/spec_error.h"
#include "tokenizer/tokenizer.h"

namespace kvlab {

TextTokens tokens_of_text(const std::string& dir, const ModelShape& shape,
                          const std::string& text) {
  TextTokens out;
  if (std::filesystem::exists(dir + "/tokenizer.json")) {
    const tok::Tokenizer tokenizer = tok::Tokenizer::load(dir);
    if (tokenizer.vocab_size() > shape.vocab_size) {
      throw SpecError("tokenizer", dir + "/tokenizer.json has " +
                                       std::to_string(tokenizer.vocab_size()) +
                                       " tokens, the model " + std::to_string(shape.vocab_size));
    }
    for (const int32_t id : tokenizer.encode(text, /*add_special_tokens=*/true))
      out.ids.push_back(id);
    out.tokenizer = "tokenizer.json";
  } else if (shape.vocab_size == 256) {
    for (const unsigned char c : text) out.ids.push_back(c);
    out.tokenizer = "bytes";
  } else {
    throw SpecError("checkpoint", dir + " has no tokenizer.json and its vocabulary is not bytes");
  }
  return out;
}

}  // namespace kvlab
