#include "tokenizer/byte_vocabulary.h"

#include <string>

#include "tokenizer/byte_level.h"

namespace kvlab::tok {

nlohmann::json byte_vocabulary_tokenizer_json() {
  const ByteLevelAlphabet alphabet;
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[alphabet.encode(std::string(1, static_cast<char>(b)))] = b;
  const nlohmann::json byte_level = {{"type", "ByteLevel"},
                                     {"add_prefix_space", false},
                                     {"trim_offsets", false},
                                     {"use_regex", false}};
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", nlohmann::json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer", byte_level},
          {"post_processor", byte_level},
          {"decoder", byte_level},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", false},
            {"vocab", vocab},
            {"merges", nlohmann::json::array()}}}};
}

nlohmann::json byte_vocabulary_tokenizer_config(int64_t model_max_length) {
  return {{"tokenizer_class", "PreTrainedTokenizerFast"},
          {"add_bos_token", false},
          {"add_eos_token", false},
          {"bos_token", nullptr},
          {"eos_token", nullptr},
          {"clean_up_tokenization_spaces", false},
          {"model_max_length", model_max_length}};
}

}  // namespace kvlab::tok
