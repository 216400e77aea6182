#pragma once

#include <cstdint>
#include <vector>

#include "cache/paged_cache.h"
#include "infer/attention_step.h"
#include "infer/decode_weights.h"
#include "kernels/fast_decoder.h"

namespace kvlab::infer {

// Prompt tokens a prefill chunk runs as the rows of one step, the chunk's weights read once for
// all of them: with 512-token prompts 128 rows ran within the noise of 256, and up to 1.5×
// (f32: 1.9×) as fast as 64 (docs/kernels/dense-decode.md).
inline constexpr int64_t kPrefillRows = 128;

// The decode step of a whole model on raw pointers (DESIGN.md: "the hot decode loop never
// touches framework objects"): embedding, per layer norm -> the layer's attention (its
// family's DecodeAttention: the variant's query and cache rows -> the attention kernel over
// the paged cache -> output projection) -> norm -> MLP, then the final norm and the LM head.
// Queries are absorbed as the kernels expect (gva: q̃_h = M_h q_h^nope; mla: W_uk folded into the
// query and W_uv into the output); gva, mla and the K=V variants never build a key. Linear
// attention updates its state in the cache.
//
// Every buffer is sized at construction for max_batch sequences or a prefill chunk's rows,
// whichever is more, the RoPE table for max_tokens positions, and the cache's page lists up
// front: once constructed, step() allocates nothing (tested with every heap allocation of the
// process counted) — except where bf16 weights stored as rows meet kBf16GemmMinRows or more
// sequences on a CPU with AMX (one without AVX-512 BF16, which no AMX CPU is known to lack; panels
// elsewhere): those products are oneDNN's, whose primitive cache lookups allocate.
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
  // Tokens [count] appended to sequence seq, run as steps of up to prefill_rows() of its
  // tokens at once (each row attending to the tokens up to its own; the dense layers read each
  // weight once a chunk), and the logits of the last token into [V]. Throws, leaving the
  // sequence as it was, where step() would.
  void prefill(int32_t seq, const int64_t* tokens, int64_t count, float* logits);
  // Rows [n]: row b appends tokens[b] to sequence seqs[b], a sequence taking any number of rows
  // (its tokens in row order) beside other sequences' rows — a serving step's decode tokens and
  // prompt chunks together, every weight read once a slice of up to max(max_batch,
  // prefill_rows()) rows (a slice never holds a sequence twice where a layer keeps a recurrent
  // state). The logits of rows logit_rows [n_logits] (increasing) into logits [n_logits][V].
  // Throws, leaving every sequence as it was, where step() would, or for logit rows out of order.
  void step_rows(const int32_t* seqs, const int64_t* tokens, int64_t n, const int64_t* logit_rows,
                 int64_t n_logits, float* logits);
  // A prompt's tokens one prefill chunk runs: kPrefillRows, or 1 where a layer keeps a
  // recurrent state (which advances token by token).
  int64_t prefill_rows() const { return prefill_rows_; }

  const DecodeWeights& weights() const { return w_; }
  int64_t vocab_size() const { return w_.shape.vocab_size; }
  CpuIsa isa() const { return decoder_.isa(); }
  // The arithmetic of the attention kernels (AttnPrecision::kF32 unless set); bf16 needs a
  // decoder that supports it (FastDecoder::supports_bf16_precision), else steps throw.
  void set_attn_precision(AttnPrecision precision) { step_.attn_precision_ = precision; }
  AttnPrecision attn_precision() const { return step_.attn_precision_; }
  // What the attention kernel computed in at the last step: the set precision where it applies
  // (see effective_precision: bf16 caches without rebuilt keys), else f32.
  AttnPrecision effective_attn_precision() const { return step_.effective_precision_; }
  bool supports_bf16_precision() const { return decoder_.supports_bf16_precision(); }
  // Adds each later step's times to *profile (nullptr: off, the default; timing costs a clock
  // read per kernel call).
  void set_profile(StepProfile* profile) { step_.profile_ = profile; }

 private:
  // Rows [n] (at most max(max_batch, prefill_rows)): row b's token appended to sequence seqs[b]
  // (a sequence may take several rows, its tokens in order), the logits of rows logit_rows
  // [n_logits] (increasing) into logits [n_logits][V].
  void run_rows(const int32_t* seqs, const int64_t* tokens, int64_t n, const int64_t* logit_rows,
                int64_t n_logits, float* logits);
  // Throws std::invalid_argument, naming the caller, for a token outside the vocabulary.
  void require_tokens(const char* caller, const int64_t* tokens, int64_t n) const;
  // Rows of a learned position table (0 without one).
  int64_t learned_position_count() const;
  void mlp(const MlpWeights& m, const float* x, float* y, int64_t n);
  void feed_forward(const FeedForwardWeights& f, const float* x, float* y, int64_t n);
  // One token's routing from its router logits (overwritten with the scores): fills
  // chosen_experts_ and expert_weights_ with routing.experts_per_token entries.
  void route(const FeedForwardWeights& f, float* scores);

  DecodeWeights w_;
  PagedKvCache& cache_;
  FastDecoder decoder_;
  AttentionStep step_;  // the batch, scratch and helpers every layer's attention runs on
  int64_t max_batch_, prefill_rows_;
  std::vector<int32_t> prefill_seqs_;  // [prefill_rows_]: a prompt chunk's rows' sequence
  std::vector<int64_t> row_indices_;   // 0, 1, …: step()'s logit rows, every row
  // scratch, sized for max_batch rows
  std::vector<float> hidden_, normed_, block_out_;
  std::vector<float> mlp_a_, mlp_b_, mlp_out_, expert_out_, router_;
  std::vector<float> route_choice_, group_scores_, expert_weights_;
  std::vector<int64_t> chosen_experts_, chosen_groups_;
};

}  // namespace kvlab::infer
