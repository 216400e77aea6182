#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "cache/paged_cache.h"
#include "infer/decode_model.h"
#include "infer/sampling_options.h"
#include "nn/transformer.h"

namespace kvlab::infer {

// Decoding with a cache that holds exactly the spec's layout. A decode step (one token per
// sequence) runs entirely on raw pointers (DecodeModel: dense layers, norms, RoPE and the
// attention kernels, absorbed for gva and mla; gva with dr=0 rebuilds every cached key inside
// the kernel) and allocates nothing. A prompt runs through the same step, up to kPrefillRows of
// its tokens as the rows of one (DecodeModel::prefill: each row attends over the cache up to its
// own token, so prefill sees the same rounded rows decode will); linear attention steps its
// constant-size state token by token. The model's modules are read once, at construction.
class Generator {
 public:
  // Tokens a page of its cache holds (a serving engine sizes its pool in these).
  static constexpr int64_t kPageSize = 16;
  // rope_dtype: the rope stream's dtype where it is not the spec's default (bf16 under q8_0,
  // q4_0 and fp8 caches; AttentionSpec::rope_cache_dtype). key_order: the key stream's order
  // (throws SpecError where the cache cannot take it); unset, fastest_key_order (the decoder's
  // ISA) picks it. max_pages: the cache's pages of kPageSize tokens (0: enough for every sequence
  // at max_tokens_per_seq; a serving engine sizes it from its memory budget). weight_dtype: how
  // the decode step stores the dense layers' matrices (load_decode_weights), for prompts and
  // decoding alike.
  Generator(nn::TransformerModel model, DType cache_dtype, int64_t max_tokens_per_seq,
            int64_t max_seqs, int threads, std::optional<DType> rope_dtype = std::nullopt,
            std::optional<KeyOrder> key_order = std::nullopt, int64_t max_pages = 0,
            DType weight_dtype = DType::kF32);

  int32_t add_sequence();
  void free_sequence(int32_t seq);
  // Runs tokens [T] of one sequence (appended after what it holds) and returns the logits
  // of its last token [V].
  torch::Tensor feed(int32_t seq, const std::vector<int64_t>& tokens);
  // One token for each sequence of a (ragged) batch: logits [n, V].
  torch::Tensor step(const std::vector<int32_t>& seqs, const std::vector<int64_t>& tokens);
  // The same into logits [n][V]: allocates nothing (n <= max_seqs).
  void step(const int32_t* seqs, const int64_t* tokens, int64_t n, float* logits);
  // Decode tokens and prompt chunks of several sequences as the rows of one step
  // (DecodeModel::step_rows).
  void step_rows(const int32_t* seqs, const int64_t* tokens, int64_t n, const int64_t* logit_rows,
                 int64_t n_logits, float* logits) {
    decode_.step_rows(seqs, tokens, n, logit_rows, n_logits, logits);
  }
  int64_t length(int32_t seq) const { return cache_.length(seq); }
  int64_t vocab_size() const { return decode_.vocab_size(); }
  const PagedKvCache& cache() const { return cache_; }
  // The cache itself, for a caller that owns its pages (PagedKvCache::use_external_pages).
  PagedKvCache& cache() { return cache_; }
  // The decode step's attention arithmetic and profiling (see DecodeModel), prompts' chunks
  // included.
  DecodeModel& decode_model() { return decode_; }
  const DecodeModel& decode_model() const { return decode_; }

 private:
  CacheLayout layout_;
  PagedKvCache cache_;
  DecodeModel decode_;
};

// The most likely token of logits [n] (the first of ties), allocation-free.
int64_t greedy_token(const float* logits, int64_t n);
// Picks the next token from logits [V].
int64_t sample(const torch::Tensor& logits, const SamplingOptions& options, std::mt19937_64& rng);

}  // namespace kvlab::infer
