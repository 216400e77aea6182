#include "nn/mla_attention.h"

#include <cmath>

#include "nn/causal_attention.h"

namespace kvlab::nn {

MlaAttentionImpl::MlaAttentionImpl(const AttentionSpec& spec, const torch::TensorOptions& options)
    : AttentionImpl(spec) {
  const int64_t D = spec.d_model, H = spec.n_heads;
  const int64_t q_width = H * (spec.nope_dim + spec.rope_dim);
  const bool in_bias = spec.bias != BiasKind::kNone;
  const bool all_bias = spec.bias == BiasKind::kAll;
  if (spec.q_latent_dim == 0) {
    q_proj = register_module("q_proj", Linear(D, q_width, in_bias, options));
  } else {
    q_a_proj = register_module("q_a_proj", Linear(D, spec.q_latent_dim, in_bias, options));
    q_a_layernorm = register_module("q_a_layernorm",
                                    Norm(spec.norm, spec.q_latent_dim, options, spec.norm_eps));
    q_b_proj = register_module("q_b_proj", Linear(spec.q_latent_dim, q_width, all_bias, options));
  }
  kv_a_proj_with_mqa = register_module(
      "kv_a_proj_with_mqa", Linear(D, spec.latent_dim + spec.rope_dim, in_bias, options));
  if (!spec.plain_latent) {
    kv_a_layernorm =
        register_module("kv_a_layernorm", Norm(spec.norm, spec.latent_dim, options, spec.norm_eps));
  }
  kv_b_proj = register_module(
      "kv_b_proj",
      Linear(spec.latent_dim, H * (spec.nope_dim + spec.value_dim), all_bias, options));
  o_proj = register_module("o_proj", Linear(H * spec.value_dim, D, all_bias, options));
}

double MlaAttentionImpl::scale() const { return spec_.softmax_scale(); }

MlaAttentionImpl::Query MlaAttentionImpl::project_query(const torch::Tensor& x, int64_t start_pos) {
  const torch::Tensor q_flat = q_proj ? q_proj(x) : q_b_proj(q_a_layernorm(q_a_proj(x)));
  const torch::Tensor q = split_heads(q_flat, spec_.n_heads);  // [B, T, H, d_n + d_r]
  return {q.narrow(-1, 0, spec_.nope_dim),
          apply_rope(q.narrow(-1, spec_.nope_dim, spec_.rope_dim), start_pos, spec_.rope_theta,
                     spec_.rope_scaling)};
}

std::vector<torch::Tensor> MlaAttentionImpl::latent(const torch::Tensor& x, int64_t start_pos) {
  const torch::Tensor kv_a = kv_a_proj_with_mqa(x).unsqueeze(2);  // [B, T, 1, d_c + d_r]
  const torch::Tensor latent = kv_a.narrow(-1, 0, spec_.latent_dim);
  const torch::Tensor c = kv_a_layernorm ? kv_a_layernorm(latent) : latent;
  const torch::Tensor k_rope = apply_rope(kv_a.narrow(-1, spec_.latent_dim, spec_.rope_dim),
                                          start_pos, spec_.rope_theta, spec_.rope_scaling);
  return {c, k_rope};
}

torch::Tensor MlaAttentionImpl::w_uk() const {
  // kv_b weight [H·(d_n + d_v), d_c], head h's rows: first d_n are W_uk,h, next d_v W_uv,h
  return kv_b_proj->weight.view({spec_.n_heads, spec_.nope_dim + spec_.value_dim, -1})
      .narrow(1, 0, spec_.nope_dim);
}

torch::Tensor MlaAttentionImpl::w_uv() const {
  return kv_b_proj->weight.view({spec_.n_heads, spec_.nope_dim + spec_.value_dim, -1})
      .narrow(1, spec_.nope_dim, spec_.value_dim);
}

torch::Tensor MlaAttentionImpl::absorb_query(const torch::Tensor& q_nope) const {
  // [B, T, H, d_n] x [H, d_n, d_c] -> [B, T, H, d_c]
  return torch::einsum("bthn,hnc->bthc", {q_nope, w_uk()});
}

torch::Tensor MlaAttentionImpl::absorb_output(const torch::Tensor& latent_out) const {
  torch::Tensor v = torch::einsum("bthc,hvc->bthv", {latent_out, w_uv()});
  if (kv_b_proj->bias.defined()) {
    // Σ_j p_j (W c_j + b) = W Σ_j p_j c_j + b, since the weights p_j sum to one
    const torch::Tensor b = kv_b_proj->bias.view({spec_.n_heads, spec_.nope_dim + spec_.value_dim})
                                .narrow(1, spec_.nope_dim, spec_.value_dim);
    v = v + b;
  }
  return v;
}

torch::Tensor MlaAttentionImpl::scores(const torch::Tensor& x, bool absorbed) {
  const Query q = project_query(x, 0);
  const std::vector<torch::Tensor> lat = latent(x, 0);
  const int64_t H = spec_.n_heads;
  // rope part, shared key: [B, H, T, d_r] · [B, 1, d_r, T]
  const torch::Tensor rope_scores =
      torch::matmul(q.rope.transpose(1, 2), lat[1].transpose(1, 2).transpose(-1, -2));
  torch::Tensor content;
  if (absorbed) {
    const torch::Tensor q_tilde = absorb_query(q.nope);  // [B, T, H, d_c]
    content = torch::matmul(q_tilde.transpose(1, 2), lat[0].transpose(1, 2).transpose(-1, -2));
    if (kv_b_proj->bias.defined()) {
      // q·b_k is constant over keys; added so the scores (not only the softmax) agree
      const torch::Tensor b_k =
          kv_b_proj->bias.view({H, spec_.nope_dim + spec_.value_dim}).narrow(1, 0, spec_.nope_dim);
      content = content + torch::einsum("bthn,hn->bht", {q.nope, b_k}).unsqueeze(-1);
    }
  } else {
    const torch::Tensor k_nope =
        split_heads(kv_b_proj(lat[0].squeeze(2)), H).narrow(-1, 0, spec_.nope_dim);
    content = torch::matmul(q.nope.transpose(1, 2), k_nope.transpose(1, 2).transpose(-1, -2));
  }
  return (content + rope_scores) * scale();
}

torch::Tensor MlaAttentionImpl::forward(const torch::Tensor& x, int64_t start_pos) {
  const Query q = project_query(x, start_pos);
  const std::vector<torch::Tensor> lat = latent(x, start_pos);
  const int64_t H = spec_.n_heads;
  const torch::Tensor kv = split_heads(kv_b_proj(lat[0].squeeze(2)), H);  // [B, T, H, d_n + d_v]
  const torch::Tensor k_nope = kv.narrow(-1, 0, spec_.nope_dim);
  const torch::Tensor v = kv.narrow(-1, spec_.nope_dim, spec_.value_dim);
  if (runs_fused(q.nope, kv.size(1), 0)) {
    // one group per head: [q^nope, q^rope] against [k^nope_h, r], [B, T, H, d_n + d_r]
    const torch::Tensor query = torch::cat({q.nope, q.rope}, -1);
    const torch::Tensor key =
        torch::cat({k_nope, lat[1].expand({kv.size(0), kv.size(1), H, spec_.rope_dim})}, -1);
    return o_proj(fused_attention(query, key, v, scale()).flatten(2));
  }
  // every head has its own key: one group per head, [B, H, 1, T, ·]
  const torch::Tensor scores =
      (torch::matmul(group_queries(q.nope, H), group_keys(k_nope).transpose(-1, -2)) +
       torch::matmul(group_queries(q.rope, H), group_keys(lat[1]).transpose(-1, -2))) *
      scale();
  const torch::Tensor p = softmax_scores(scores, /*mask_offset=*/0);
  return o_proj(merge_grouped_heads(torch::matmul(p, group_keys(v))));
}

std::vector<torch::Tensor> MlaAttentionImpl::cache_rows(const torch::Tensor& x, int64_t start_pos) {
  return latent(x, start_pos);
}

torch::Tensor MlaAttentionImpl::forward_from_cache(const torch::Tensor& x,
                                                   const std::vector<torch::Tensor>& rows,
                                                   int64_t start_pos) {
  const Query q = project_query(x, start_pos);
  const torch::Tensor& c = rows.at(0);       // [B, Tk, 1, d_c]
  const torch::Tensor& k_rope = rows.at(1);  // [B, Tk, 1, d_r]
  // one-stream shape: all H heads share one row per token, G = 1
  const torch::Tensor q_tilde = absorb_query(q.nope);  // [B, Tq, H, d_c]
  if (runs_fused(q_tilde, c.size(1), start_pos)) {
    // [q̃, q^rope] against [c, r]; q·b_k of a kv_b bias is constant over keys: the softmax
    // ignores it
    const torch::Tensor query = torch::cat({q_tilde, q.rope}, -1);  // [B, T, H, d_c + d_r]
    const torch::Tensor key = torch::cat({c, k_rope}, -1);          // [B, T, 1, d_c + d_r]
    return o_proj(absorb_output(fused_attention(query, key, c, scale())).flatten(2));
  }
  torch::Tensor scores =
      torch::matmul(group_queries(q_tilde, 1), group_keys(c).transpose(-1, -2)) +
      torch::matmul(group_queries(q.rope, 1), group_keys(k_rope).transpose(-1, -2));
  if (kv_b_proj->bias.defined()) {
    const int64_t H = spec_.n_heads;
    const torch::Tensor b_k =
        kv_b_proj->bias.view({H, spec_.nope_dim + spec_.value_dim}).narrow(1, 0, spec_.nope_dim);
    // q·b_k per head and query: [B, H, Tq] -> [B, 1, H, Tq, 1], constant over keys
    scores = scores + torch::einsum("bthn,hn->bht", {q.nope, b_k}).unsqueeze(1).unsqueeze(-1);
  }
  const torch::Tensor p = softmax_scores(scores * scale(), start_pos);  // [B, 1, H, Tq, Tk]
  const torch::Tensor latent_out = torch::matmul(p, group_keys(c));     // [B, 1, H, Tq, d_c]
  // [B, 1, H, Tq, d_c] -> [B, Tq, H, d_c]
  const torch::Tensor per_head = latent_out.squeeze(1).permute({0, 2, 1, 3});
  const torch::Tensor v = absorb_output(per_head);  // [B, Tq, H, d_v]
  return o_proj(v.flatten(2));
}

AttentionImpl::DecodeQuery MlaAttentionImpl::decode_query(const torch::Tensor& x,
                                                          int64_t start_pos) {
  const Query q = project_query(x, start_pos);
  DecodeQuery out;
  // with a kv_b bias, q·b_k is the same for every key: the softmax ignores it
  out.q = absorb_query(q.nope);
  out.q_rope = q.rope;
  out.scale = scale();
  return out;
}

torch::Tensor MlaAttentionImpl::decode_output(const torch::Tensor& attended) {
  return o_proj(absorb_output(attended).flatten(2));
}

std::shared_ptr<AttentionImpl> make_mla_attention(const AttentionSpec& spec,
                                                  const torch::TensorOptions& options) {
  return std::make_shared<MlaAttentionImpl>(spec, options);
}

}  // namespace kvlab::nn
