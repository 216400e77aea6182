#pragma once

#include <cstdint>
#include <vector>

#include "cache/paged_cache.h"
#include "infer/decode_weights.h"
#include "kernels/fast_decoder.h"

namespace kvlab::infer {

// The decode step of a whole model on raw pointers (DESIGN.md: "the hot decode loop never
// touches framework objects"): embedding, per layer norm -> the variant's query and cache
// rows -> the attention kernel over the paged cache -> output projection -> norm -> MLP,
// then the final norm and the LM head. Queries are absorbed as the kernels expect (gva:
// q̃_h = M_h q_h^nope; mla: W_uk folded into the query and W_uv into the output); gva, mla
// and the K=V variants never build a key. Linear attention updates its state in the cache.
//
// Every buffer is sized at construction for max_batch sequences, the RoPE table for
// max_tokens positions, and the cache's page lists up front: once constructed, step()
// allocates nothing (tested with every heap allocation of the process counted).
// Where decode steps spent their time (DecodeModel::set_profile): the dense layers (matrix-vector
// products), the attention kernels, and the whole steps; the rest is norms, RoPE, embedding
// and cache writes. Sums over `steps` steps, in microseconds.
struct StepProfile {
  double dense_us = 0, attention_us = 0, step_us = 0;
  int64_t steps = 0;
};

class DecodeModel {
 public:
  // `cache` must be laid out by the weights' attention spec (any cache dtype) and outlive
  // this object.
  DecodeModel(DecodeWeights weights, PagedKvCache& cache, int threads, int64_t max_batch,
              int64_t max_tokens);

  // One token for each of n sequences (distinct, live): appends it to the cache, writes
  // its rows, and leaves logits [n][V] in `logits`. Throws (changing no sequence) when the
  // cache is full, a learned position table is exceeded, n exceeds max_batch or a token
  // is outside the vocabulary.
  void step(const int32_t* seqs, const int64_t* tokens, int64_t n, float* logits);

  const DecodeWeights& weights() const { return w_; }
  int64_t vocab_size() const { return w_.shape.vocab_size; }
  CpuIsa isa() const { return decoder_.isa(); }
  // The arithmetic of the attention kernels (AttnPrecision::kF32 unless set); bf16 needs a
  // decoder that supports it (FastDecoder::supports_bf16_precision), else steps throw.
  void set_attn_precision(AttnPrecision precision) { attn_precision_ = precision; }
  AttnPrecision attn_precision() const { return attn_precision_; }
  // What the attention kernel computed in at the last step: the set precision where it applies
  // (see effective_precision: bf16 caches without rebuilt keys), else f32.
  AttnPrecision effective_attn_precision() const { return effective_precision_; }
  bool supports_bf16_precision() const { return decoder_.supports_bf16_precision(); }
  // Adds each later step's times to *profile (nullptr: off, the default; timing costs a clock
  // read per kernel call).
  void set_profile(StepProfile* profile) { profile_ = profile; }

 private:
  // y [n][layer.out] (row stride y_stride, 0: out) = layer(x [n][x_stride])
  void dense(const DenseWeights& layer, const float* x, int64_t x_stride, float* y,
             int64_t y_stride, int64_t n);
  // Per-head maps (gva's M_h, mla's W_uk,hᵀ and W_uv,h): y[b][h] = W_h x[b][h] (+ bias_h) for
  // weights [H][out][in], bias [H][out] or nullptr, x [n][H][x_width] (the first `in` of each
  // head's slice used), y [n][H][out].
  void per_head(const float* weights, const float* bias, int64_t out, int64_t in, const float* x,
                int64_t x_width, float* y, int64_t n, int64_t H);
  void mlp(const MlpWeights& m, const float* x, float* y, int64_t n);
  void feed_forward(const FeedForwardWeights& f, const float* x, float* y, int64_t n);
  // One token's routing from its router logits (overwritten with the scores): fills
  // chosen_experts_ and expert_weights_ with routing.experts_per_token entries.
  void route(const FeedForwardWeights& f, float* scores);
  // Attention of `layer` for the normed inputs x [n][D]: rows written, output [n][D] in y.
  void attention(int64_t layer, const float* x, float* y, int64_t n);
  // The family adapters attention() dispatches to (the same contract).
  void standard_attention(int64_t layer, const AttentionWeights& a, const float* x, float* y,
                          int64_t n);
  void gva_attention(int64_t layer, const AttentionWeights& a, const float* x, float* y, int64_t n);
  void mla_attention(int64_t layer, const AttentionWeights& a, const float* x, float* y, int64_t n);
  void gla_attention(int64_t layer, const AttentionWeights& a, const float* x, float* y, int64_t n);
  void linear_attention(int64_t layer, const AttentionWeights& a, const float* x, float* y,
                        int64_t n);
  // The attention kernel in the decoder's precision (and timed when profiling).
  void run_attention_kernel(DecodeParams& p);
  void store_rows(int64_t layer, StreamRole role, const float* rows, int64_t width, int64_t n);
  // Rotates x [width] (RoPE, halves form) to position pos; the cos/sin of the last
  // (pos, width, θ, scaling) are kept, so the heads of one token share them.
  void rotate(float* x, int64_t width, int64_t pos, const AttentionSpec& spec);

  DecodeWeights w_;
  PagedKvCache& cache_;
  AttnPrecision attn_precision_ = AttnPrecision::kF32;
  AttnPrecision effective_precision_ = AttnPrecision::kF32;
  StepProfile* profile_ = nullptr;
  FastDecoder decoder_;
  int64_t max_batch_;
  PageTable table_;
  std::vector<int32_t> batch_seqs_;
  std::vector<int64_t> positions_;  // per batch row: position of its new token
  // scratch, sized for max_batch rows
  std::vector<float> hidden_, normed_, block_out_;
  std::vector<float> proj_a_, proj_b_, proj_c_;  // projections of the attention layer
  std::vector<float> query_, query_rope_, attended_, expanded_;
  std::vector<float> mlp_a_, mlp_b_, mlp_out_, expert_out_, router_;
  std::vector<float> route_choice_, group_scores_, expert_weights_;
  std::vector<int64_t> chosen_experts_, chosen_groups_;
  std::vector<float> rope_row_;  // [cos ; sin] of the position rotate() last turned
  int64_t rope_pos_ = -1, rope_width_ = 0;
  double rope_theta_ = 0;
  RopeScaling rope_scaling_;
};

}  // namespace kvlab::infer
