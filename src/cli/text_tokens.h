#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "spec/model_shape.h"

namespace kvlab {

// A text as a model folder's tokens: through its tokenizer.json (special tokens added as the
// tokenizer says), else byte by byte for a 256-token vocabulary.
struct TextTokens {
  std::vector<int64_t> ids;
  std::string tokenizer;  // "tokenizer.json" | "bytes"
};

// Throws SpecError("tokenizer") when the tokenizer has more tokens than the model and
// SpecError("checkpoint") when the folder has neither a tokenizer.json nor a byte vocabulary.
TextTokens tokens_of_text(const std::string& dir, const ModelShape& shape, const std::string& text);

}  // namespace kvlab
