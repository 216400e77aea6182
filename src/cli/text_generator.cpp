#include "cli/text_generator.h"

#include <filesystem>

#include "experiments/eval_decode.h"
#include "nn/checkpoint.h"
#include "nn/threads.h"
#include "spec/memory_budget.h"
#include "spec/spec_error.h"

namespace kvlab {

void TextGenerator::check_request(const GenerateOptions& o) {
  if (o.max_tokens < 0) throw SpecError("max_tokens", "must be >= 0");
  if (o.max_tokens > (int64_t{1} << 31)) throw SpecError("max_tokens", "must be <= 2^31");
  if (!(o.temperature >= 0)) throw SpecError("temperature", "must be >= 0 (0: greedy)");
  if (o.top_k < 0) throw SpecError("top_k", "must be >= 0");
  if (!(o.top_p > 0 && o.top_p <= 1)) throw SpecError("top_p", "must be in (0, 1]");
  if (o.prompt.empty()) throw SpecError("prompt", "must not be empty");
}

TextGenerator::TextGenerator(const GenerateOptions& o)
    : precision_(o.precision), use_cache_(!o.no_cache) {
  cache_dtype_ = parse_dtype(o.cache_dtype, "cache_dtype");
  weight_dtype_ = parse_weight_dtype_flag(o.weight_dtype);
  threads_ = nn::set_threads(o.threads);
  const std::string dir = nn::checkpoint_dir(o.checkpoint);
  model_ = nn::load_model(dir);
  if (!o.rope_dtype.empty() && o.no_cache) {
    throw SpecError("rope-dtype", "--no-cache keeps no cache to set a rope stream of");
  }
  rope_dtype_ = parse_rope_dtype_flag(o.rope_dtype, model_->config().attn, cache_dtype_);
  const ModelShape& shape = model_->config().shape;
  // A folder's tokenizer.json (Hugging Face folders, kvlab exports) turns text into tokens;
  // without one, the model must read bytes.
  if (std::filesystem::exists(dir + "/tokenizer.json"))
    tokenizer_.emplace(tok::Tokenizer::load(dir));
  if (!shape.causal() || (!tokenizer_ && shape.vocab_size != 256)) {
    throw SpecError("checkpoint", dir +
                                      " is not a language model with a tokenizer.json or a "
                                      "byte vocabulary (train one with --task text)");
  }
}

std::vector<int64_t> TextGenerator::encode(const std::string& text) const {
  std::vector<int64_t> tokens;
  if (tokenizer_) {
    for (const int32_t id : tokenizer_->encode(text, /*add_special_tokens=*/true)) {
      tokens.push_back(id);
    }
  } else {
    for (const unsigned char ch : text) tokens.push_back(ch);
  }
  return tokens;
}

std::string TextGenerator::decode(const std::vector<int32_t>& ids) const {
  if (tokenizer_) return tokenizer_->decode(ids, /*skip_special_tokens=*/true);
  std::string text;
  for (const int32_t id : ids) text += static_cast<char>(id);
  return text;
}

TextGenerator::Result TextGenerator::generate(const GenerateOptions& o,
                                              const std::function<bool()>& should_stop) const {
  check_request(o);
  const std::vector<int64_t> tokens = encode(o.prompt);
  const ModelShape& shape = model_->config().shape;
  const int64_t total = static_cast<int64_t>(tokens.size()) + o.max_tokens;
  if (use_cache_) {
    require_memory("max_tokens",
                   "a cache for prompt + max-tokens = " + std::to_string(total) + " tokens",
                   [&] { return model_->config().cache_bytes(total, 1); });
  }
  if (shape.pos == PosScheme::kLearned && total > shape.max_context) {
    throw SpecError("max_tokens", "prompt + max-tokens = " + std::to_string(total) +
                                      " exceeds the model's " + std::to_string(shape.max_context) +
                                      " learned positions");
  }
  infer::TextGenerationOptions generation;
  generation.max_tokens = o.max_tokens;
  generation.sampling = {o.temperature, o.top_k, o.top_p};
  generation.seed = o.seed;
  generation.eos_id = tokenizer_ ? tokenizer_->eos_id() : std::nullopt;
  generation.use_cache = use_cache_;
  generation.cache_dtype = cache_dtype_;
  generation.rope_dtype = rope_dtype_;
  generation.attn_precision = precision_;
  generation.weight_dtype = weight_dtype_;
  generation.threads = threads_;
  Result result;
  result.prompt_tokens = static_cast<int64_t>(tokens.size());
  result.run = infer::generate_text_tokens(model_, tokens, generation, should_stop);
  result.text = decode(result.run.tokens);
  return result;
}

}  // namespace kvlab
