#pragma once

#include "nn/attention.h"
#include "nn/layers.h"

namespace kvlab::nn {

// Grouped value attention (seed 000, DESIGN.md "GVA, exactly"): v_g = W_v,g x cached per
// group; each query head h rebuilds its content key k_h^nope = v_g(h) M_h with its own
// M_h (d_h × d_n); a decoupled RoPE key k^rope = RoPE(W_r x) of width d_r is shared by all
// heads. Absorbed: q̃_h = q_h^nope M_hᵀ once per token, then one-stream attention over the
// value rows. With dr = 0 the reconstructed key is rotated over its full width and cannot
// be absorbed: keys are rebuilt for every cached position.
// The same module is gta (grouped-tied attention): M_h fixed to the selection of the first
// d_n = d_h − d_r channels, so key_maps is undefined, keys are slices of the tied state and
// the absorbed query is q_h^nope padded with zeros.
class GvaAttentionImpl : public AttentionImpl {
 public:
  GvaAttentionImpl(const AttentionSpec& spec, const torch::TensorOptions& options);

  torch::Tensor forward(const torch::Tensor& x, int64_t start_pos = 0) override;
  std::vector<torch::Tensor> cache_rows(const torch::Tensor& x, int64_t start_pos = 0) override;
  torch::Tensor forward_from_cache(const torch::Tensor& x, const std::vector<torch::Tensor>& rows,
                                   int64_t start_pos) override;
  DecodeQuery decode_query(const torch::Tensor& x, int64_t start_pos) override;
  torch::Tensor decode_output(const torch::Tensor& attended) override;

  // Pre-softmax scores [B, H, T, T]: explicit (reconstructed keys) or absorbed (dr > 0 only).
  torch::Tensor scores(const torch::Tensor& x, bool absorbed);
  ProjectionWeights projection_weights() const override;
  // q̃_h = q_h^nope M_hᵀ: [B, T, H, d_n] -> [B, T, H, d_h]
  torch::Tensor absorb_query(const torch::Tensor& q_nope) const;
  // Re-initialises M_h by the spec's init (baseline, scale-matched, variance-fixed).
  void reset_key_maps();

  Linear q_proj{nullptr};  // D -> H·(d_n + d_r)
  Linear v_proj{nullptr};  // D -> G·d_h
  Linear r_proj{nullptr};  // D -> d_r, the shared RoPE key (dr > 0)
  Norm q_norm{nullptr};    // qnorm: RMSNorm over d_n, per head
  Linear o_proj{nullptr};  // H·d_h -> D
  torch::Tensor key_maps;  // M: [H, d_h, d_n], k_h^nope = v_g(h) M_h (undefined for gta)

 private:
  struct Query {
    torch::Tensor nope;  // [B, T, H, d_n], q-normed
    torch::Tensor rope;  // [B, T, H, d_r], rotated (undefined when dr = 0)
  };
  Query project_query(const torch::Tensor& x, int64_t start_pos);
  // k_h^nope for every head: values [B, T, G, d_h] -> [B, T, H, d_n]
  torch::Tensor reconstruct_keys(const torch::Tensor& values) const;
  // Keys sit at positions key_start ..; mask_offset = first query position - key_start.
  // The same function through the fused kernel (runs_fused): with a rope key in the absorbed
  // form, one pass over G groups of [value row, rope key]; without one, every head's rebuilt
  // rotated key against its group's values repeated per head.
  torch::Tensor attend_fused(const Query& q, const torch::Tensor& values,
                             const torch::Tensor& k_rope, int64_t key_start);
  torch::Tensor attend_explicit(const Query& q, const torch::Tensor& values,
                                const torch::Tensor& k_rope, int64_t key_start,
                                int64_t mask_offset);
  double scale() const;
};

}  // namespace kvlab::nn
