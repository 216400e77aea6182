#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <span>
#include <vector>

#include "cache/paged_cache.h"
#include "infer/decode_weights.h"
#include "kernels/fast_decoder.h"

namespace kvlab::infer {

// Where decode steps spent their time (DecodeModel::set_profile): the dense layers (matrix-vector
// products), the attention kernels, and the whole steps; the rest is norms, RoPE, embedding
// and cache writes. Sums over `steps` steps, in microseconds.
struct StepProfile {
  double dense_us = 0, attention_us = 0, step_us = 0;
  int64_t steps = 0;
};

// x [width] -> y [width] (LayerNorm or RMSNorm); x and y may be the same array.
void apply_norm(const NormWeights& norm, const float* x, float* y);
// h [width] += residual (unless null), then y = norm(h): the same floats as the add followed by
// apply_norm, RMSNorm's in one pass over h and the residual.
void add_and_norm(const NormWeights& norm, float* h, const float* residual, float* y);

// What a layer's decode step runs on (DecodeAttention::run): the step's batch (its rows: each a
// new token of a sequence, a prompt's tokens taking several rows of one; each row's position, and
// the page table showing each row its sequence up to its own token), the cache, scratch arrays
// sized for the batch,
// and the helpers that run dense layers, RoPE and the kernels on the model's decoder (timed
// into the profile when one is set). DecodeModel owns it and sets the batch each step.
class AttentionStep {
 public:
  AttentionStep(PagedKvCache& cache, FastDecoder& decoder, int64_t d_model);

  // Sizes the scratch arrays and the batch for max_batch rows of the widest layer, and the
  // page table for max_tokens tokens a sequence: after this the step allocates nothing.
  void reserve(const ScratchWidths& widths, int64_t max_batch, int64_t max_tokens);

  int64_t d_model() const { return d_model_; }
  PagedKvCache& cache() { return cache_; }
  int32_t seq(int64_t b) const { return seqs_[static_cast<size_t>(b)]; }
  int64_t pos(int64_t b) const { return positions_[static_cast<size_t>(b)]; }
  const PageTable& table() const { return table_; }

  // y [n][layer.out] (row stride y_stride, 0: out) = layer(x [n][x_stride]); nothing for an empty
  // layer
  void dense(const DenseWeights& layer, const float* x, int64_t x_stride, float* y,
             int64_t y_stride, int64_t n);
  // One layer of dense(outputs, …): y [n][layer.out] (row stride y_stride, 0: out) = layer(x).
  struct DenseOutput {
    const DenseWeights* layer;
    float* y;
    int64_t y_stride;
  };
  // The layers that read the same x [n][x_stride] (q, k and v; up and gate), empty ones skipped:
  // each run of consecutive layers stored alike (dtype and order) in one call of the decoder,
  // which prepares x once for them (FastDecoder::run's products).
  void dense(std::span<const DenseOutput> outputs, const float* x, int64_t x_stride, int64_t n);
  // Per-head maps (gva's M_h, mla's W_uk,hᵀ and W_uv,h): y[b][h] = W_h x[b][h] (+ bias_h) for
  // weights [H][out][in], bias [H][out] or nullptr, x [n][H][x_width] (the first `in` of each
  // head's slice used), y [n][H][out].
  void per_head(const float* weights, const float* bias, int64_t out, int64_t in, const float* x,
                int64_t x_width, float* y, int64_t n, int64_t H);
  // Rotates x [width] (RoPE, halves form) to the position of batch row b's new token. Each row
  // keeps the cos/sin of its last (position, width, θ, scaling), so a token's heads and layers
  // share them while the batch's sequences sit at different positions.
  void rotate(float* x, int64_t width, int64_t b, const AttentionSpec& spec);
  // Rows [first, last) of [n][width], the batch's new tokens, into the stream of `role`.
  void store_rows(int64_t layer, StreamRole role, const float* rows, int64_t width, int64_t first,
                  int64_t last);
  void store_rows(int64_t layer, StreamRole role, const float* rows, int64_t width, int64_t n) {
    store_rows(layer, role, rows, width, 0, n);
  }
  // fn(first, last) over the batch rows [0, rows), each call touching only its rows' scratch,
  // cache rows and RoPE rows: on the calling thread alone below kRowsOnPoolElements elements,
  // else one contiguous share a thread of the decoder's pool (the norms, RoPE, cache writes and
  // gated activations of a batch, which would otherwise be the only serial part of a step). An
  // exception in a share is rethrown here, after every share has ended.
  template <class Fn>
  void for_rows(int64_t rows, int64_t elements_per_row, Fn&& fn);
  // The kernel's parameters for `layer` of a spec over the step's batch: the query from
  // `query`, the output to `attended` (the caller sets the rest its family needs).
  DecodeParams kernel_params(const AttentionSpec& spec, int64_t layer);
  // mla's and gla's values from the kernel's weighted sums of latent rows, `attended`
  // [n][H][row] (the first d_c of each used): expanded [n][H][d_v] = W_uv,h (Σ p c) + b_v,h.
  void expand_values(const AbsorbedUpProjections& up, int64_t value_dim, int64_t latent_dim,
                     int64_t row, int64_t n, int64_t H);
  // The attention kernel in the set precision.
  void run_attention_kernel(DecodeParams& p);
  // Linear attention's state update.
  void run_linear_step(const LinearStepParams& p);

  // Scratch, [max_batch][the widest layer's width]
  std::vector<float> proj_a, proj_b, proj_c;  // projections of the attention layer
  std::vector<float> query, query_rope, attended, expanded;

 private:
  friend class DecodeModel;

  PagedKvCache& cache_;
  FastDecoder& decoder_;
  int64_t d_model_;
  AttnPrecision attn_precision_ = AttnPrecision::kF32;
  AttnPrecision effective_precision_ = AttnPrecision::kF32;
  StepProfile* profile_ = nullptr;
  PageTable table_;
  std::vector<int32_t> seqs_;
  std::vector<int64_t> positions_;   // per batch row: position of its new token
  std::vector<int64_t> row_tokens_;  // per batch row: the tokens its attention sees (position + 1)
  // What row b of rope_rows_ holds: the [cos ; sin] of this position, width, θ and scaling
  struct RopeRowKey {
    int64_t pos = -1, width = 0;
    double theta = 0;
    RopeScaling scaling;
  };
  std::vector<float> rope_rows_;  // [max_batch][rope_stride_]
  std::vector<RopeRowKey> rope_keys_;
  int64_t rope_stride_ = 0;
};

// Below this many elements a batch's per-row work stays on the calling thread: a share's hand-off
// would cost about what splitting it saves (both measured in docs/kernels/dense-decode.md).
inline constexpr int64_t kRowsOnPoolElements = int64_t{1} << 13;

template <class Fn>
void AttentionStep::for_rows(int64_t rows, int64_t elements_per_row, Fn&& fn) {
  ThreadPool& pool = decoder_.pool();
  if (rows < 2 || pool.size() == 1 || rows * elements_per_row < kRowsOnPoolElements) {
    fn(int64_t{0}, rows);
    return;
  }
  constexpr int64_t kMostShares = 64;
  const int64_t shares = std::min<int64_t>({rows, pool.size(), kMostShares});
  std::exception_ptr failed[kMostShares];
  pool.parallel_for(shares, [&](int64_t t) {
    try {
      fn(rows * t / shares, rows * (t + 1) / shares);
    } catch (...) {
      failed[t] = std::current_exception();
    }
  });
  for (int64_t t = 0; t < shares; ++t) {
    if (failed[t]) std::rethrow_exception(failed[t]);
  }
}

}  // namespace kvlab::infer
