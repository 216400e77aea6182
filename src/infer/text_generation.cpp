#include "infer/text_generation.h"

#include <chrono>
#include <random>

#include "kernels/attn_precision.h"
#include "spec/spec_error.h"

namespace kvlab::infer {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

TextGenerationResult generate_text_tokens(nn::TransformerModel model,
                                          const std::vector<int64_t>& prompt_tokens,
                                          const TextGenerationOptions& options,
                                          const std::function<bool()>& should_stop) {
  if (prompt_tokens.empty()) throw SpecError("prompt", "must hold at least one token");
  if (options.max_tokens < 0) throw SpecError("max_tokens", "must be >= 0");
  TextGenerationResult result;
  const auto stopped = [&] {
    result.stopped = result.stopped || (should_stop && should_stop());
    return result.stopped;
  };
  const auto ended = [&] {
    return options.eos_id && !result.tokens.empty() && result.tokens.back() == *options.eos_id;
  };
  std::mt19937_64 rng(options.seed);
  if (!options.use_cache) {
    const auto start = Clock::now();
    c10::InferenceMode guard;
    std::vector<int64_t> tokens = prompt_tokens;
    for (int64_t i = 0; i < options.max_tokens && !ended() && !stopped(); ++i) {
      const torch::Tensor input = torch::tensor(tokens, torch::kInt64).view({1, -1});  // [1, T]
      const torch::Tensor logits = model->forward(input)[0][-1];                       // [V]
      tokens.push_back(sample(logits, options.sampling, rng));
      result.tokens.push_back(static_cast<int32_t>(tokens.back()));
    }
    result.decode_s = seconds_since(start);
    result.decode_steps = static_cast<int64_t>(result.tokens.size());
    return result;
  }
  const int64_t total = static_cast<int64_t>(prompt_tokens.size()) + options.max_tokens;
  auto start = Clock::now();
  Generator gen(model, options.cache_dtype, total, 1, options.threads, options.rope_dtype,
                std::nullopt, 0, options.weight_dtype);
  result.weight_bytes = gen.decode_model().weights().bytes_read_per_token();
  gen.decode_model().set_attn_precision(resolve_decode_attn_precision(
      options.attn_precision, gen.decode_model().supports_bf16_precision(), options.cache_dtype));
  const int32_t seq = gen.add_sequence();
  result.setup_s = seconds_since(start);
  if (options.max_tokens == 0) return result;
  start = Clock::now();
  torch::Tensor logits = gen.feed(seq, prompt_tokens);  // [V]
  result.prompt_s = seconds_since(start);
  start = Clock::now();
  for (int64_t i = 0; i < options.max_tokens && !ended() && !stopped(); ++i) {
    const int64_t next = sample(logits, options.sampling, rng);
    result.tokens.push_back(static_cast<int32_t>(next));
    if (i + 1 < options.max_tokens && !ended()) {
      logits = gen.step({seq}, {next})[0];
      ++result.decode_steps;
    }
  }
  result.decode_s = seconds_since(start);
  return result;
}

}  // namespace kvlab::infer
