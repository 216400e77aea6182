#pragma once

#include "nn/attention.h"
#include "nn/layers.h"

namespace kvlab::nn {

// Grouped latent attention (Zadouri, Strauss, Dao 2025): MLA with C latent heads. Per token,
// latent head g holds c_g = Norm(W_dkv,g x) (d_c) and its own k^rope_g = RoPE(W_kr,g x) (d_r);
// query head h reads latent head g(h) = h / (H/C): [k^nope_h, v_h] = W_ukv,h c_g(h),
// score = (q^nope_h·k^nope_h + q^rope_h·k^rope_g(h)) / sqrt(d_n + d_r). The cache holds one row
// [c_g ; k^rope_g] per latent head; absorbed, q̃_h = [W_uk,hᵀ q_h^nope ; q_h^rope] scores the
// whole row, and W_uv,h maps the first d_c channels of the weighted sum. With C = 1 it is MLA.
class GlaAttentionImpl : public AttentionImpl {
 public:
  GlaAttentionImpl(const AttentionSpec& spec, const torch::TensorOptions& options);

  torch::Tensor forward(const torch::Tensor& x, int64_t start_pos = 0) override;
  std::vector<torch::Tensor> cache_rows(const torch::Tensor& x, int64_t start_pos = 0) override;
  torch::Tensor forward_from_cache(const torch::Tensor& x, const std::vector<torch::Tensor>& rows,
                                   int64_t start_pos) override;
  DecodeQuery decode_query(const torch::Tensor& x, int64_t start_pos) override;
  torch::Tensor decode_output(const torch::Tensor& attended) override;

  Linear q_proj{nullptr};        // D -> H·(d_n + d_r)
  Linear kv_a_proj{nullptr};     // D -> C·(d_c + d_r): per latent head [c_g ; k^rope_g]
  Norm kv_a_layernorm{nullptr};  // over d_c, the same weights for every latent head
  Linear kv_b_proj{nullptr};     // d_c -> H·(d_n + d_v): W_uk and W_uv, head by head
  Linear o_proj{nullptr};        // H·d_v -> D

 private:
  struct Query {
    torch::Tensor nope;  // [B, T, H, d_n]
    torch::Tensor rope;  // [B, T, H, d_r], rotated
  };
  Query project_query(const torch::Tensor& x, int64_t start_pos);
  // The cached rows [c_g ; k^rope_g]: [B, T, C, d_c + d_r]
  torch::Tensor latent_rows(const torch::Tensor& x, int64_t start_pos);
  // Each query head's latent head: [B, T, C, w] -> [B, T, H, w]
  torch::Tensor per_query_head(const torch::Tensor& grouped) const;
  // [B, T, H, d_n] -> [B, T, H, d_c + d_r], the query the cached rows are scored by
  torch::Tensor absorb_query(const Query& q) const;
  // the first d_c channels of Σ_j p_j row_j -> Σ_j p_j v_j: [B, T, H, ≥d_c] -> [B, T, H, d_v]
  torch::Tensor absorb_output(const torch::Tensor& latent_out) const;
  torch::Tensor up_weights() const;  // [H, d_n + d_v, d_c]
  double scale() const;
};

}  // namespace kvlab::nn
