#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "spec/attention_spec.h"

namespace kvlab::nn {

// One attention layer built from an AttentionSpec. Every variant implements three views of
// the same function:
//  - forward(): the explicit (training) form over a whole sequence;
//  - cache_rows(): exactly what the spec's cache layout stores for each token, one tensor
//    per CacheLayout stream, [B, T, n_heads, head_width] — and nothing else;
//  - forward_from_cache(): queries attending to such rows in the form the decode kernels
//    use (absorbed for gva and mla, rotate-on-read for the shared K=V + RoPE layout).
// The equality forward(x) == forward_from_cache(x, cache_rows(x), 0) is the oracle the
// decode engine is built on.
class AttentionImpl : public torch::nn::Module {
 public:
  explicit AttentionImpl(const AttentionSpec& spec) : spec_(spec) {}

  const AttentionSpec& spec() const { return spec_; }

  // x: [B, T, D], tokens at positions start_pos .. start_pos + T - 1 -> [B, T, D]
  virtual torch::Tensor forward(const torch::Tensor& x, int64_t start_pos = 0) = 0;
  // x: [B, T, D] -> one tensor per cache stream, [B, T, n_heads, head_width]
  virtual std::vector<torch::Tensor> cache_rows(const torch::Tensor& x, int64_t start_pos = 0);
  // x: [B, Tq, D] at positions start_pos ..; rows: cache_rows of positions 0 .. Tk - 1 with
  // Tk = start_pos + Tq (the new tokens' rows included) -> [B, Tq, D]
  virtual torch::Tensor forward_from_cache(const torch::Tensor& x,
                                           const std::vector<torch::Tensor>& rows,
                                           int64_t start_pos);

  // What a decode kernel needs from this layer for tokens x [B, T, D] at positions
  // start_pos ..: the queries against the cached key rows (rotated; absorbed for gva and
  // mla) [B, T, H, key_width], the queries against the shared rope stream [B, T, H, d_r] (or
  // undefined) and the score scale.
  struct DecodeQuery {
    torch::Tensor q;
    torch::Tensor q_rope;
    double scale = 1.0;
  };
  virtual DecodeQuery decode_query(const torch::Tensor& x, int64_t start_pos);
  // The kernel's weighted sums over value rows [B, T, H, value_width] -> layer output [B, T, D]
  // (mla applies W_uv here, then every variant its output projection).
  virtual torch::Tensor decode_output(const torch::Tensor& attended);

  // Analysis: the weights [out, in] that make queries, keys and values where the layer has
  // them as matrices (the standard family; gva's and gta's Q and V); a shared projection is
  // the same tensor in each role it plays; undefined elsewhere.
  struct ProjectionWeights {
    torch::Tensor q, k, v;
  };
  virtual ProjectionWeights projection_weights() const { return {}; }

  // Analysis: while kept, every softmax attention pass stores its probabilities
  // [B, H, Tq, Tk] (head h = g·(H/G) + i for grouped layouts); linear attention has none.
  void keep_attention_maps(bool keep) { keep_maps_ = keep; }
  const torch::Tensor& last_attention_map() const { return last_map_; }

  // Full causal forwards (training, prefill) of softmax layers run the fused kernel
  // (nn/causal_attention.h) where it applies; off, libtorch's composed ops, its reference.
  void use_fused_attention(bool fused) { fused_attention_ = fused; }

 protected:
  // Causal mask for Tq queries over Tk keys, the first query mask_offset positions after the
  // first key: true where masked.
  torch::Tensor causal_mask(int64_t tq, int64_t tk, int64_t mask_offset,
                            const torch::Device& device) const;
  // scores: [..., Tq, Tk] -> softmax over keys (in f32 at least), masked when causal.
  torch::Tensor softmax_scores(torch::Tensor scores, int64_t mask_offset) const;
  // Whether queries q [B, Tq, H, ·] over tk keys, the first query mask_offset positions after the
  // first key, run the fused kernel: fused on, causal, no attention maps kept, a dtype the kernel
  // takes, and either queries and keys at the same positions or, without a gradient (prefill),
  // the queries the last Tq of the keys.
  bool runs_fused(const torch::Tensor& q, int64_t tk, int64_t mask_offset) const;
  // The fused kernel where runs_fused: fused_causal_attention (with a gradient), else the forward
  // alone, fused_causal_attention_after.
  static torch::Tensor fused_attention(const torch::Tensor& q, const torch::Tensor& k,
                                       const torch::Tensor& v, double scale);

  AttentionSpec spec_;
  bool keep_maps_ = false;
  bool fused_attention_ = true;
  mutable torch::Tensor last_map_;
};

// Builds the module of any variant; parameters are created with `options` (dtype,
// device: the meta device builds without memory).
std::shared_ptr<AttentionImpl> make_attention(const AttentionSpec& spec,
                                              const torch::TensorOptions& options);
// The families' modules (nn/<family>_attention.cpp), found through make_attention.
#define KVLAB_ATTENTION_FAMILY(Name, id)                                          \
  std::shared_ptr<AttentionImpl> make_##id##_attention(const AttentionSpec& spec, \
                                                       const torch::TensorOptions& options);
#include "spec/attention_families.def"

// Reshapes [B, T, n*d] to [B, T, n, d].
torch::Tensor split_heads(const torch::Tensor& x, int64_t n_heads);
// Groups query heads [B, T, H, d] -> [B, G, H/G, T, d] and keys [B, T, G, d] -> [B, G, 1, T, d]
// so that one matmul serves every head of a group against its group's rows.
torch::Tensor group_queries(const torch::Tensor& q, int64_t n_groups);
torch::Tensor group_keys(const torch::Tensor& k);
// [B, G, H/G, T, d] -> [B, T, H·d]
torch::Tensor merge_grouped_heads(const torch::Tensor& out);

}  // namespace kvlab::nn
