#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "infer/generator.h"
#include "nn/transformer.h"
#include "spec/dtype.h"

namespace kvlab::infer {

// One sequence continued token by token: what `kvlab generate` runs, and what a server's
// request runs alone.
struct TextGenerationOptions {
  int64_t max_tokens = 64;
  SamplingOptions sampling;
  uint64_t seed = 0;
  std::optional<int32_t> eos_id;  // generation ends after it (it is kept in the output)
  bool use_cache = true;          // false: one full forward per token, nothing cached
  DType cache_dtype = DType::kF32;
  std::optional<DType> rope_dtype;     // see Generator
  std::string attn_precision = "f32";  // "f32", "bf16" or "auto" (resolve_attn_precision)
  DType weight_dtype = DType::kF32;    // the decode step's dense layers (see Generator)
  int threads = 1;
};

struct TextGenerationResult {
  std::vector<int32_t> tokens;  // generated, the prompt not included
  bool stopped = false;         // should_stop() ended it early
  // Seconds: building the decode engine (weights repacked, cache allocated), the prompt's
  // pass, and the decode steps after it.
  double setup_s = 0, prompt_s = 0, decode_s = 0;
  // Decode steps run: with the cache, the last token's logits come with the one before it, so
  // n tokens cost n − 1 steps; without it, every token is one full forward.
  int64_t decode_steps = 0;
  // The bytes of weights a decode step reads (DecodeWeights::bytes_read_per_token); 0 without
  // the cache.
  int64_t weight_bytes = 0;
};

// Continues prompt_tokens [T >= 1] of model with up to options.max_tokens tokens, sampled with
// a generator seeded by options.seed (the same seed, the same tokens). should_stop (may be
// empty) is asked before each token. Throws SpecError naming the option for a precision the
// cache cannot run.
TextGenerationResult generate_text_tokens(nn::TransformerModel model,
                                          const std::vector<int64_t>& prompt_tokens,
                                          const TextGenerationOptions& options,
                                          const std::function<bool()>& should_stop);

}  // namespace kvlab::infer
