#include "nn/gva_attention.h"

#include <cmath>

#include "nn/causal_attention.h"

namespace kvlab::nn {

GvaAttentionImpl::GvaAttentionImpl(const AttentionSpec& spec, const torch::TensorOptions& options)
    : AttentionImpl(spec) {
  const int64_t D = spec.d_model, H = spec.n_heads, d = spec.head_dim, G = spec.n_groups;
  const bool in_bias = spec.bias != BiasKind::kNone;
  const bool all_bias = spec.bias == BiasKind::kAll;
  q_proj =
      register_module("q_proj", Linear(D, H * (spec.nope_dim + spec.rope_dim), in_bias, options));
  v_proj = register_module("v_proj", Linear(D, G * d, in_bias, options));
  if (spec.rope_dim > 0) {
    r_proj = register_module("r_proj", Linear(D, spec.rope_dim, in_bias, options));
  }
  if (spec.q_norm)
    q_norm =
        register_module("q_norm", Norm(NormKind::kRmsNorm, spec.nope_dim, options, spec.norm_eps));
  o_proj = register_module("o_proj", Linear(H * d, D, all_bias, options));
  if (spec.family() == AttnFamily::kGva) {  // gta: M_h is the fixed selection, not a parameter
    key_maps = register_parameter("key_maps", torch::empty({H, d, spec.nope_dim}, options));
    reset_key_maps();
  }
}

void GvaAttentionImpl::reset_key_maps() {
  if (!key_maps.defined()) return;
  torch::NoGradGuard no_grad;
  const double d = static_cast<double>(spec_.head_dim);
  switch (spec_.m_init) {
    case GvaInit::kBaseline:  // torch's Linear default for a d_h-input map
      key_maps.uniform_(-1.0 / std::sqrt(d), 1.0 / std::sqrt(d));
      break;
    case GvaInit::kScaleMatched:  // N(0, 1/d_h): Var(k) ≈ Var(v)
      key_maps.normal_(0.0, 1.0 / std::sqrt(d));
      break;
    case GvaInit::kVarianceFixed:  // orthogonal per head
      for (int64_t h = 0; h < spec_.n_heads; ++h) {
        torch::Tensor m = key_maps[h];
        torch::nn::init::orthogonal_(m);
      }
      break;
  }
}

double GvaAttentionImpl::scale() const { return spec_.softmax_scale(); }

GvaAttentionImpl::Query GvaAttentionImpl::project_query(const torch::Tensor& x, int64_t start_pos) {
  const torch::Tensor q = split_heads(q_proj(x), spec_.n_heads);  // [B, T, H, d_n + d_r]
  Query out;
  out.nope = q.narrow(-1, 0, spec_.nope_dim);
  if (q_norm) out.nope = q_norm(out.nope);
  if (spec_.rope_dim > 0) {
    out.rope = apply_rope(q.narrow(-1, spec_.nope_dim, spec_.rope_dim), start_pos, spec_.rope_theta,
                          spec_.rope_scaling);
  } else {
    out.nope =
        apply_rope(out.nope, start_pos, spec_.rope_theta, spec_.rope_scaling);  // full-width RoPE
  }
  return out;
}

torch::Tensor GvaAttentionImpl::reconstruct_keys(const torch::Tensor& values) const {
  const int64_t H = spec_.n_heads, G = spec_.n_groups;
  const int64_t b = values.size(0), t = values.size(1);
  if (!key_maps.defined()) {  // gta: each head's key is its group's first d_n channels
    // [B, T, G, d_n] -> [B, T, G, H/G, d_n] -> [B, T, H, d_n]
    return values.narrow(-1, 0, spec_.nope_dim)
        .unsqueeze(3)
        .expand({b, t, G, H / G, spec_.nope_dim})
        .reshape({b, t, H, spec_.nope_dim});
  }
  // [B, T, G, d_h] -> [B, T, G, H/G, d_h] · [G, H/G, d_h, d_n] -> [B, T, H, d_n]
  const torch::Tensor maps = key_maps.view({G, H / G, spec_.head_dim, spec_.nope_dim});
  return torch::einsum("btgd,gkdn->btgkn", {values, maps}).reshape({b, t, H, spec_.nope_dim});
}

torch::Tensor GvaAttentionImpl::absorb_query(const torch::Tensor& q_nope) const {
  if (!key_maps.defined()) {  // gta: the selection's transpose pads q^nope with zeros to d_h
    return torch::constant_pad_nd(q_nope, {0, spec_.head_dim - spec_.nope_dim});
  }
  // q̃_h = q_h^nope M_hᵀ: [B, T, H, d_n] x [H, d_h, d_n] -> [B, T, H, d_h]
  return torch::einsum("bthn,hdn->bthd", {q_nope, key_maps});
}

torch::Tensor GvaAttentionImpl::attend_fused(const Query& q, const torch::Tensor& values,
                                             const torch::Tensor& k_rope, int64_t key_start) {
  const int64_t H = spec_.n_heads, G = spec_.n_groups;
  const int64_t b = values.size(0), t = values.size(1);
  if (spec_.rope_dim > 0) {
    // q̃_h · v_j + q^rope_h · r_j: queries [B, T, H, d_h + d_r] against keys [B, T, G, d_h + d_r]
    const torch::Tensor query = torch::cat({absorb_query(q.nope), q.rope}, -1);
    const torch::Tensor key = torch::cat({values, k_rope.expand({b, t, G, spec_.rope_dim})}, -1);
    return o_proj(fused_attention(query, key, values, scale()).flatten(2));
  }
  const torch::Tensor k_nope =  // [B, T, H, d_n]
      apply_rope(reconstruct_keys(values), key_start, spec_.rope_theta, spec_.rope_scaling);
  const torch::Tensor v = values.repeat_interleave(H / G, /*dim=*/2);  // [B, T, H, d_h]
  return o_proj(fused_attention(q.nope, k_nope, v, scale()).flatten(2));
}

torch::Tensor GvaAttentionImpl::attend_explicit(const Query& q, const torch::Tensor& values,
                                                const torch::Tensor& k_rope, int64_t key_start,
                                                int64_t mask_offset) {
  const int64_t H = spec_.n_heads, G = spec_.n_groups;
  const int64_t tk = values.size(1);
  if (runs_fused(q.nope, tk, mask_offset)) return attend_fused(q, values, k_rope, key_start);
  torch::Tensor k_nope = reconstruct_keys(values);  // [B, Tk, H, d_n]
  if (spec_.rope_dim == 0)
    k_nope = apply_rope(k_nope, key_start, spec_.rope_theta, spec_.rope_scaling);
  // each head its own key: [B, H, 1, Tq, d_n] · [B, H, 1, d_n, Tk]
  torch::Tensor scores =
      torch::matmul(group_queries(q.nope, H), group_keys(k_nope).transpose(-1, -2));
  if (spec_.rope_dim > 0) {
    scores = scores + torch::matmul(group_queries(q.rope, H), group_keys(k_rope).transpose(-1, -2));
  }
  const torch::Tensor p = softmax_scores(scores * scale(), mask_offset);  // [B, H, 1, Tq, Tk]
  // values are per group: regroup p to [B, G, H/G, Tq, Tk]
  const torch::Tensor p_grouped = p.view({p.size(0), G, H / G, p.size(3), tk});
  return o_proj(merge_grouped_heads(torch::matmul(p_grouped, group_keys(values))));
}

torch::Tensor GvaAttentionImpl::forward(const torch::Tensor& x, int64_t start_pos) {
  const Query q = project_query(x, start_pos);
  const torch::Tensor values = split_heads(v_proj(x), spec_.n_groups);  // [B, T, G, d_h]
  torch::Tensor k_rope;
  if (r_proj)
    k_rope = apply_rope(r_proj(x).unsqueeze(2), start_pos, spec_.rope_theta, spec_.rope_scaling);
  return attend_explicit(q, values, k_rope, /*key_start=*/start_pos, /*mask_offset=*/0);
}

std::vector<torch::Tensor> GvaAttentionImpl::cache_rows(const torch::Tensor& x, int64_t start_pos) {
  std::vector<torch::Tensor> rows = {split_heads(v_proj(x), spec_.n_groups)};
  if (r_proj)
    rows.push_back(
        apply_rope(r_proj(x).unsqueeze(2), start_pos, spec_.rope_theta, spec_.rope_scaling));
  return rows;
}

torch::Tensor GvaAttentionImpl::forward_from_cache(const torch::Tensor& x,
                                                   const std::vector<torch::Tensor>& rows,
                                                   int64_t start_pos) {
  const Query q = project_query(x, start_pos);
  const torch::Tensor& values = rows.at(0);  // [B, Tk, G, d_h]
  if (spec_.rope_dim == 0) {                 // keys are rebuilt for every cached position
    return attend_explicit(q, values, {}, /*key_start=*/0, /*mask_offset=*/start_pos);
  }
  const int64_t G = spec_.n_groups;
  const torch::Tensor& k_rope = rows.at(1);  // [B, Tk, 1, d_r]
  if (runs_fused(q.nope, values.size(1), start_pos)) return attend_fused(q, values, k_rope, 0);
  const torch::Tensor q_tilde = absorb_query(q.nope);  // [B, Tq, H, d_h]
  // one-stream: each value row is read once per group and serves as key and value
  const torch::Tensor scores =
      torch::matmul(group_queries(q_tilde, G), group_keys(values).transpose(-1, -2)) +
      torch::matmul(group_queries(q.rope, G), group_keys(k_rope).transpose(-1, -2));
  const torch::Tensor p = softmax_scores(scores * scale(), start_pos);
  return o_proj(merge_grouped_heads(torch::matmul(p, group_keys(values))));
}

torch::Tensor GvaAttentionImpl::scores(const torch::Tensor& x, bool absorbed) {
  const Query q = project_query(x, 0);
  const int64_t H = spec_.n_heads, G = spec_.n_groups;
  const torch::Tensor values = split_heads(v_proj(x), G);
  torch::Tensor s;
  if (absorbed) {
    if (spec_.rope_dim == 0) throw std::logic_error("gva with dr=0 cannot be absorbed");
    s = torch::matmul(group_queries(absorb_query(q.nope), G), group_keys(values).transpose(-1, -2))
            .flatten(1, 2);
  } else {
    torch::Tensor k_nope = reconstruct_keys(values);
    if (spec_.rope_dim == 0) k_nope = apply_rope(k_nope, 0, spec_.rope_theta, spec_.rope_scaling);
    s = torch::matmul(group_queries(q.nope, H), group_keys(k_nope).transpose(-1, -2)).flatten(1, 2);
  }
  if (spec_.rope_dim > 0) {
    const torch::Tensor k_rope =
        apply_rope(r_proj(x).unsqueeze(2), 0, spec_.rope_theta, spec_.rope_scaling);
    s = s +
        torch::matmul(group_queries(q.rope, G), group_keys(k_rope).transpose(-1, -2)).flatten(1, 2);
  }
  return s * scale();
}

AttentionImpl::DecodeQuery GvaAttentionImpl::decode_query(const torch::Tensor& x,
                                                          int64_t start_pos) {
  const Query q = project_query(x, start_pos);
  // dr=0: the kernel rebuilds each key from the value rows (DecodeParams::key_maps), so the
  // query stays as it is, rotated over the full width
  if (spec_.rope_dim == 0) return {q.nope, {}, scale()};
  return {absorb_query(q.nope), q.rope, scale()};
}

torch::Tensor GvaAttentionImpl::decode_output(const torch::Tensor& attended) {
  return o_proj(attended.flatten(2));
}

AttentionImpl::ProjectionWeights GvaAttentionImpl::projection_weights() const {
  ProjectionWeights p;
  p.q = q_proj->weight.detach();
  p.v = v_proj->weight.detach();
  return p;
}

std::shared_ptr<AttentionImpl> make_gva_attention(const AttentionSpec& spec,
                                                  const torch::TensorOptions& options) {
  return std::make_shared<GvaAttentionImpl>(spec, options);
}

// GTA is GVA's module with M_h fixed to the channel selection (no key_maps parameter).
std::shared_ptr<AttentionImpl> make_gta_attention(const AttentionSpec& spec,
                                                  const torch::TensorOptions& options) {
  return std::make_shared<GvaAttentionImpl>(spec, options);
}

}  // namespace kvlab::nn
