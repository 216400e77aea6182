#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cli/generate_command.h"
#include "infer/text_generation.h"
#include "nn/transformer.h"
#include "tokenizer/tokenizer.h"

namespace kvlab {

// What `kvlab generate` holds between loading a checkpoint and printing: the model, its
// tokenizer (or bytes) and the decode settings, parsed and checked once, ready for prompts.
// `kvlab generate` runs one prompt; the Python package's kvlab.Generator keeps one for many.
class TextGenerator {
 public:
  // Reads options' checkpoint, cache_dtype, weight_dtype, rope_dtype, precision, no_cache and
  // threads. Throws SpecError naming the option (or "checkpoint" for a model that reads
  // neither a tokenizer.json nor bytes).
  explicit TextGenerator(const GenerateOptions& options);
  // The per-prompt options (prompt, max_tokens, temperature, top_k, top_p), checked before
  // anything loads. Throws SpecError naming the option.
  static void check_request(const GenerateOptions& options);

  struct Result {
    std::string text;  // the generated tokens as text (special tokens skipped)
    int64_t prompt_tokens = 0;
    infer::TextGenerationResult run;
  };
  // Continues `prompt` with options' max_tokens, temperature, top_k, top_p and seed (the
  // load-time fields of `options` are ignored here). should_stop (may be empty) is asked
  // before each token. Throws SpecError naming the option.
  Result generate(const GenerateOptions& options, const std::function<bool()>& should_stop) const;

  // The prompt's tokens and the generated tokens' text, as generate() makes them.
  std::vector<int64_t> encode(const std::string& text) const;
  std::string decode(const std::vector<int32_t>& ids) const;

  const nn::TransformerModel& model() const { return model_; }
  DType weight_dtype() const { return weight_dtype_; }
  int threads() const { return threads_; }

 private:
  nn::TransformerModel model_{nullptr};
  std::optional<tok::Tokenizer> tokenizer_;
  DType cache_dtype_ = DType::kF32;
  std::optional<DType> rope_dtype_;
  DType weight_dtype_ = DType::kF32;
  std::string precision_;
  bool use_cache_ = true;
  int threads_ = 1;
};

}  // namespace kvlab
