#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/token_decoder.h"

namespace kvlab::tok {

// A Hugging Face tokenizer.json of model type BPE: the byte-level family (GPT-2, Llama 3, Qwen,
// DeepSeek) and the SentencePiece-style one with byte fallback (Llama 2, Mistral). Encoding
// runs the stages of the reference: added tokens split out of the raw text, then per section
// normalizer -> pre-tokenizer -> BPE, then the special tokens the model expects around it.
// Anything in the file kvlab does not implement is refused by its JSON path, never ignored.
class Tokenizer {
 public:
  // `path`: a tokenizer.json, or a folder holding one (tokenizer_config.json beside it is read
  // when present, for add_bos_token / add_eos_token / bos_token / eos_token).
  // Throws SpecError naming the file and field.
  static Tokenizer load(const std::string& path);
  static Tokenizer parse(std::string_view tokenizer_json, std::string_view tokenizer_config_json,
                         const std::string& source);

  // Valid UTF-8 in (SpecError("text") otherwise). With add_special_tokens, the model's
  // BOS/EOS are added as its post-processor or tokenizer_config.json asks.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const;
  // Token ids -> text (bytes that do not form UTF-8 become U+FFFD). Throws SpecError("ids")
  // naming an id the vocabulary lacks.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  int32_t vocab_size() const { return model_->size(); }
  // The vocabulary's string for an id (byte-level: GPT-2 characters), nullptr if it has none.
  const std::string* token(int32_t id) const { return model_->token(id); }
  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }
  const std::string& source() const { return source_; }

 private:
  Tokenizer() = default;

  std::string source_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<TokenDecoder> decoder_;
  std::unique_ptr<AddedTokenSplitter> splitter_;
  std::set<int32_t> special_ids_;
  std::vector<int32_t> prefix_ids_;  // added before the text with add_special_tokens
  std::vector<int32_t> suffix_ids_;  // and after it
  std::optional<int32_t> bos_id_, eos_id_;
};

}  // namespace kvlab::tok
