#include "nn/gla_attention.h"

#include <cmath>

#include "nn/causal_attention.h"

namespace kvlab::nn {

GlaAttentionImpl::GlaAttentionImpl(const AttentionSpec& spec, const torch::TensorOptions& options)
    : AttentionImpl(spec) {
  const int64_t D = spec.d_model, H = spec.n_heads, C = spec.n_groups;
  const bool in_bias = spec.bias != BiasKind::kNone;
  const bool all_bias = spec.bias == BiasKind::kAll;
  q_proj =
      register_module("q_proj", Linear(D, H * (spec.nope_dim + spec.rope_dim), in_bias, options));
  kv_a_proj = register_module("kv_a_proj",
                              Linear(D, C * (spec.latent_dim + spec.rope_dim), in_bias, options));
  kv_a_layernorm =
      register_module("kv_a_layernorm", Norm(spec.norm, spec.latent_dim, options, spec.norm_eps));
  kv_b_proj = register_module(
      "kv_b_proj",
      Linear(spec.latent_dim, H * (spec.nope_dim + spec.value_dim), all_bias, options));
  o_proj = register_module("o_proj", Linear(H * spec.value_dim, D, all_bias, options));
}

double GlaAttentionImpl::scale() const { return spec_.softmax_scale(); }

GlaAttentionImpl::Query GlaAttentionImpl::project_query(const torch::Tensor& x, int64_t start_pos) {
  const torch::Tensor q = split_heads(q_proj(x), spec_.n_heads);  // [B, T, H, d_n + d_r]
  return {q.narrow(-1, 0, spec_.nope_dim),
          apply_rope(q.narrow(-1, spec_.nope_dim, spec_.rope_dim), start_pos, spec_.rope_theta,
                     spec_.rope_scaling)};
}

torch::Tensor GlaAttentionImpl::latent_rows(const torch::Tensor& x, int64_t start_pos) {
  const torch::Tensor kv_a = split_heads(kv_a_proj(x), spec_.n_groups);  // [B, T, C, d_c + d_r]
  const torch::Tensor c = kv_a_layernorm(kv_a.narrow(-1, 0, spec_.latent_dim));
  const torch::Tensor k_rope = apply_rope(kv_a.narrow(-1, spec_.latent_dim, spec_.rope_dim),
                                          start_pos, spec_.rope_theta, spec_.rope_scaling);
  return torch::cat({c, k_rope}, -1);
}

torch::Tensor GlaAttentionImpl::per_query_head(const torch::Tensor& grouped) const {
  return grouped.repeat_interleave(spec_.n_heads / spec_.n_groups, /*dim=*/2);
}

torch::Tensor GlaAttentionImpl::up_weights() const {
  // kv_b weight [H·(d_n + d_v), d_c], head h's rows: first d_n are W_uk,h, next d_v W_uv,h
  return kv_b_proj->weight.view({spec_.n_heads, spec_.nope_dim + spec_.value_dim, -1});
}

torch::Tensor GlaAttentionImpl::absorb_query(const Query& q) const {
  const torch::Tensor w_uk = up_weights().narrow(1, 0, spec_.nope_dim);  // [H, d_n, d_c]
  // [B, T, H, d_n] x [H, d_n, d_c] -> [B, T, H, d_c], then the rope slice as it is
  return torch::cat({torch::einsum("bthn,hnc->bthc", {q.nope, w_uk}), q.rope}, -1);
}

torch::Tensor GlaAttentionImpl::absorb_output(const torch::Tensor& latent_out) const {
  const torch::Tensor w_uv = up_weights().narrow(1, spec_.nope_dim, spec_.value_dim);
  torch::Tensor v =
      torch::einsum("bthc,hvc->bthv", {latent_out.narrow(-1, 0, spec_.latent_dim), w_uv});
  if (kv_b_proj->bias.defined()) {
    // Σ_j p_j (W c_j + b) = W Σ_j p_j c_j + b, since the weights p_j sum to one
    v = v + kv_b_proj->bias.view({spec_.n_heads, spec_.nope_dim + spec_.value_dim})
                .narrow(1, spec_.nope_dim, spec_.value_dim);
  }
  return v;
}

torch::Tensor GlaAttentionImpl::forward(const torch::Tensor& x, int64_t start_pos) {
  const int64_t H = spec_.n_heads;
  const Query q = project_query(x, start_pos);
  const torch::Tensor rows = per_query_head(latent_rows(x, start_pos));  // [B, T, H, d_c + d_r]
  const torch::Tensor c = rows.narrow(-1, 0, spec_.latent_dim);
  const torch::Tensor k_rope = rows.narrow(-1, spec_.latent_dim, spec_.rope_dim);
  // [B, T, H, d_c] x [H, d_n + d_v, d_c] (+ b) -> [B, T, H, d_n + d_v]
  torch::Tensor kv = torch::einsum("bthc,hoc->btho", {c, up_weights()});
  if (kv_b_proj->bias.defined()) kv = kv + kv_b_proj->bias.view({H, -1});
  const torch::Tensor k_nope = kv.narrow(-1, 0, spec_.nope_dim);
  const torch::Tensor v = kv.narrow(-1, spec_.nope_dim, spec_.value_dim);
  if (runs_fused(q.nope, kv.size(1), 0)) {
    // one group per head: [q^nope, q^rope] against [k^nope_h, r_h], [B, T, H, d_n + d_r]
    const torch::Tensor query = torch::cat({q.nope, q.rope}, -1);
    const torch::Tensor key = torch::cat({k_nope, k_rope}, -1);
    return o_proj(fused_attention(query, key, v, scale()).flatten(2));
  }
  // every head has its own key: one group per head, [B, H, 1, T, ·]
  const torch::Tensor scores =
      (torch::matmul(group_queries(q.nope, H), group_keys(k_nope).transpose(-1, -2)) +
       torch::matmul(group_queries(q.rope, H), group_keys(k_rope).transpose(-1, -2))) *
      scale();
  const torch::Tensor p = softmax_scores(scores, /*mask_offset=*/0);
  return o_proj(merge_grouped_heads(torch::matmul(p, group_keys(v))));
}

std::vector<torch::Tensor> GlaAttentionImpl::cache_rows(const torch::Tensor& x, int64_t start_pos) {
  return {latent_rows(x, start_pos)};
}

torch::Tensor GlaAttentionImpl::forward_from_cache(const torch::Tensor& x,
                                                   const std::vector<torch::Tensor>& rows,
                                                   int64_t start_pos) {
  const int64_t H = spec_.n_heads, C = spec_.n_groups;
  const Query q = project_query(x, start_pos);
  const torch::Tensor& cached = rows.at(0);  // [B, Tk, C, d_c + d_r]
  // one-stream shape: the heads of a latent head share its row, G = C
  const torch::Tensor query = absorb_query(q);  // [B, Tq, H, d_c + d_r]
  if (runs_fused(query, cached.size(1), start_pos)) {
    // q·b_k of a kv_b bias is constant over keys: the softmax ignores it
    return o_proj(absorb_output(fused_attention(query, cached, cached, scale())).flatten(2));
  }
  torch::Tensor scores =
      torch::matmul(group_queries(query, C), group_keys(cached).transpose(-1, -2));
  if (kv_b_proj->bias.defined()) {
    const torch::Tensor b_k =
        kv_b_proj->bias.view({H, spec_.nope_dim + spec_.value_dim}).narrow(1, 0, spec_.nope_dim);
    // q·b_k per head and query is constant over keys: [B, H, Tq] -> [B, C, H/C, Tq, 1]
    const torch::Tensor q_bias = torch::einsum("bthn,hn->bht", {q.nope, b_k});
    scores = scores + q_bias.view({q_bias.size(0), C, H / C, q_bias.size(2), 1});
  }
  const torch::Tensor p = softmax_scores(scores * scale(), start_pos);  // [B, C, H/C, Tq, Tk]
  // [B, C, H/C, Tq, d_c + d_r] -> [B, Tq, H, d_c + d_r]
  const torch::Tensor summed = torch::matmul(p, group_keys(cached));
  const torch::Tensor per_head = summed.flatten(1, 2).permute({0, 2, 1, 3});
  return o_proj(absorb_output(per_head).flatten(2));
}

AttentionImpl::DecodeQuery GlaAttentionImpl::decode_query(const torch::Tensor& x,
                                                          int64_t start_pos) {
  // with a kv_b bias, q·b_k is the same for every key: the softmax ignores it
  return {absorb_query(project_query(x, start_pos)), {}, scale()};
}

torch::Tensor GlaAttentionImpl::decode_output(const torch::Tensor& attended) {
  return o_proj(absorb_output(attended).flatten(2));
}

std::shared_ptr<AttentionImpl> make_gla_attention(const AttentionSpec& spec,
                                                  const torch::TensorOptions& options) {
  return std::make_shared<GlaAttentionImpl>(spec, options);
}

}  // namespace kvlab::nn
