#pragma once

#include <nlohmann/json.hpp>

namespace kvlab::tok {

// kvlab's byte-level models read raw bytes: token id b is byte b. As a Hugging Face
// tokenizer.json this is a byte-level BPE with the 256 GPT-2 byte characters as its vocabulary
// (id b for byte b), no merges and no regex split, so every tokenizer that reads the format
// (transformers, tokenizers, transformers.js, kvlab) encodes a text to exactly its bytes.
nlohmann::json byte_vocabulary_tokenizer_json();
// The tokenizer_config.json beside it: no BOS/EOS, no clean-up of spaces.
nlohmann::json byte_vocabulary_tokenizer_config(int64_t model_max_length);

}  // namespace kvlab::tok
