#pragma once

#include "nn/attention.h"
#include "nn/layers.h"

namespace kvlab::nn {

// DeepSeek-V2 multi-head latent attention. Explicit form: c = Norm(W_dkv x) (d_c),
// k^rope = RoPE(W_kr x) (d_r, shared by all heads), [k^nope_h, v_h] = W_ukv,h c,
// score = (q^nope·k^nope + q^rope·k^rope) / sqrt(d_n + d_r). The cache holds c and k^rope;
// the absorbed form folds W_uk into the query (q̃_h = W_uk,hᵀ q_h^nope, width d_c) and W_uv
// into the output, so no key or value is ever expanded.
class MlaAttentionImpl : public AttentionImpl {
 public:
  MlaAttentionImpl(const AttentionSpec& spec, const torch::TensorOptions& options);

  torch::Tensor forward(const torch::Tensor& x, int64_t start_pos = 0) override;
  std::vector<torch::Tensor> cache_rows(const torch::Tensor& x, int64_t start_pos = 0) override;
  torch::Tensor forward_from_cache(const torch::Tensor& x, const std::vector<torch::Tensor>& rows,
                                   int64_t start_pos) override;
  DecodeQuery decode_query(const torch::Tensor& x, int64_t start_pos) override;
  torch::Tensor decode_output(const torch::Tensor& attended) override;

  // Pre-softmax scores [B, H, T, T], explicit (expanded keys) or absorbed (latent rows).
  torch::Tensor scores(const torch::Tensor& x, bool absorbed);
  // q̃_h = W_uk,hᵀ q_h^nope: [B, T, H, d_n] -> [B, T, H, d_c]
  torch::Tensor absorb_query(const torch::Tensor& q_nope) const;
  // Σ_j p_j v_j from Σ_j p_j c_j: [B, T, H, d_c] -> [B, T, H, d_v]
  torch::Tensor absorb_output(const torch::Tensor& latent_out) const;

  Linear q_proj{nullptr};              // D -> H·(d_n + d_r), full-rank query
  Linear q_a_proj{nullptr};            // D -> d_q, low-rank query
  Norm q_a_layernorm{nullptr};         // over d_q
  Linear q_b_proj{nullptr};            // d_q -> H·(d_n + d_r)
  Linear kv_a_proj_with_mqa{nullptr};  // D -> d_c + d_r
  Norm kv_a_layernorm{nullptr};        // over d_c (none with plainlatent)
  Linear kv_b_proj{nullptr};           // d_c -> H·(d_n + d_v): W_uk and W_uv, head by head
  Linear o_proj{nullptr};              // H·d_v -> D

 private:
  struct Query {
    torch::Tensor nope;  // [B, T, H, d_n]
    torch::Tensor rope;  // [B, T, H, d_r], rotated
  };
  Query project_query(const torch::Tensor& x, int64_t start_pos);
  // c [B, T, 1, d_c] and rotated k^rope [B, T, 1, d_r]
  std::vector<torch::Tensor> latent(const torch::Tensor& x, int64_t start_pos);
  torch::Tensor w_uk() const;  // [H, d_n, d_c]
  torch::Tensor w_uv() const;  // [H, d_v, d_c]
  double scale() const;
};

}  // namespace kvlab::nn
