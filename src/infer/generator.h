#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "cache/paged_cache.h"
#include "kernels/fast_decoder.h"
#include "nn/transformer.h"

namespace kvlab::infer {

// Decoding with a cache that holds exactly the spec's layout. Projections, norms and MLPs
// run through the libtorch modules; attention over the cache runs in the raw-pointer
// kernels (FastDecoder: one- and two-stream, absorbed for gva and mla; gva with dr=0 rebuilds
// every cached key inside the kernel). A prompt runs as one batched pass (the module's decode
// form over rows read back from the cache); linear attention carries its constant-size state.
class Generator {
 public:
  Generator(nn::TransformerModel model, DType cache_dtype, int64_t max_tokens_per_seq,
            int64_t max_seqs, int threads);

  int32_t add_sequence();
  void free_sequence(int32_t seq);
  // Runs tokens [T] of one sequence (appended after what it holds) and returns the logits
  // of its last token [V].
  torch::Tensor feed(int32_t seq, const std::vector<int64_t>& tokens);
  // One token for each sequence of a (ragged) batch: logits [n, V].
  torch::Tensor step(const std::vector<int32_t>& seqs, const std::vector<int64_t>& tokens);
  int64_t length(int32_t seq) const { return cache_.length(seq); }
  const PagedKvCache& cache() const { return cache_; }

 private:
  // Attention of layer `layer` for x [1, 1, D] of sequence seq at position pos, the new
  // token's rows already written: [1, 1, D].
  torch::Tensor attend(int64_t layer, int32_t seq, const torch::Tensor& x, int64_t pos);
  void write_rows(int64_t layer, int32_t seq, int64_t first_pos,
                  const std::vector<torch::Tensor>& rows);
  std::vector<torch::Tensor> gather_rows(int64_t layer, int32_t seq);
  // Tokens [T] appended to sequence seq in one pass -> logits of the last one [V].
  torch::Tensor run_tokens(int32_t seq, const std::vector<int64_t>& tokens);

  nn::TransformerModel model_;
  CacheLayout layout_;
  PagedKvCache cache_;
  FastDecoder decoder_;
  PageTable table_;                          // reused: no allocation per step once grown
  std::vector<torch::Tensor> key_maps_;      // gva dr=0: per layer, f32 [H, d_h, d_n]
  std::vector<torch::Tensor> norm_weights_;  // K = RoPE(RMSNorm(C)): per layer, f32 [d]
  // linear attention: per layer, per sequence slot
  std::vector<std::vector<torch::Tensor>> linear_kv_, linear_sum_;
};

struct SamplingOptions {
  double temperature = 0.0;  // 0: greedy
  int64_t top_k = 0;         // 0: off
  double top_p = 1.0;        // 1: off
};
// Picks the next token from logits [V].
int64_t sample(const torch::Tensor& logits, const SamplingOptions& options, std::mt19937_64& rng);

}  // namespace kvlab::infer
