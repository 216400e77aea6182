#include "nn/standard_attention.h"

#include <cmath>

#include "nn/causal_attention.h"
#include "spec/attention_family.h"

namespace kvlab::nn {

StandardAttentionImpl::StandardAttentionImpl(const AttentionSpec& spec,
                                             const torch::TensorOptions& options)
    : AttentionImpl(spec) {
  const int64_t D = spec.d_model, H = spec.n_heads, d = spec.head_dim, G = spec.n_groups;
  const bool in_bias = spec.bias != BiasKind::kNone;
  const bool all_bias = spec.bias == BiasKind::kAll;
  auto linear = [&](const char* name, int64_t out) {
    return register_module(name, Linear(D, out, in_bias, options));
  };
  const bool q_is_k = standard_queries_are_keys(spec), k_is_v = spec.shares_kv();
  if (q_is_k && k_is_v) {  // Q=K=V
    qkv_proj = linear("qkv_proj", H * d);
  } else if (q_is_k) {  // Q=K≠V
    qk_proj = linear("qk_proj", H * d);
    v_proj = linear("v_proj", H * d);
  } else if (k_is_v) {  // Q≠K=V, K=V per group
    q_proj = linear("q_proj", H * d);
    kv_proj = linear("kv_proj", G * d);
  } else {
    q_proj = linear("q_proj", H * d);
    k_proj = linear("k_proj", G * d);
    v_proj = linear("v_proj", G * d);
  }
  o_proj = register_module("o_proj", Linear(H * d, D, all_bias, options));
  if (spec.k_norm || spec.qk_norm) {
    k_norm = register_module("k_norm", Norm(NormKind::kRmsNorm, d, options, spec.norm_eps));
  }
  if (spec.qk_norm) {
    q_norm = register_module("q_norm", Norm(NormKind::kRmsNorm, d, options, spec.norm_eps));
  }
  if (is_plus()) {
    const int64_t m = spec.bias_channels;
    const double bound = 1.0 / std::sqrt(static_cast<double>(m));
    pos_mix_weight = register_parameter("pos_mix_weight", torch::empty({H, m}, options));
    pos_mix_bias = register_parameter("pos_mix_bias", torch::empty({H}, options));
    torch::NoGradGuard no_grad;
    pos_mix_weight.uniform_(-bound, bound);  // torch's Conv2d default for a 1×1 kernel
    pos_mix_bias.uniform_(-bound, bound);
  }
}

bool StandardAttentionImpl::is_plus() const { return spec_.pos == PosScheme::kBias2d; }

torch::Tensor StandardAttentionImpl::project_query(const torch::Tensor& x) {
  const int64_t H = spec_.n_heads;
  if (qk_proj) return split_heads(qk_proj(x), H);
  if (qkv_proj) return split_heads(qkv_proj(x), H);
  const torch::Tensor q = split_heads(q_proj(x), H);  // [B, T, H, d]
  return q_norm ? q_norm(q) : q;
}

torch::Tensor StandardAttentionImpl::keys_from_content(const torch::Tensor& content,
                                                       int64_t start_pos) {
  torch::Tensor k = spec_.k_norm ? k_norm->forward(content) : content;
  return spec_.pos == PosScheme::kRope
             ? apply_rope(k, start_pos, spec_.rope_theta, spec_.rope_scaling)
             : k;
}

StandardAttentionImpl::Streams StandardAttentionImpl::project(const torch::Tensor& x,
                                                              int64_t start_pos) {
  const int64_t G = spec_.n_groups;
  const bool rope = spec_.pos == PosScheme::kRope;
  Streams s;
  const torch::Tensor q = project_query(x);  // [B, T, H, d]
  s.q = rope ? apply_rope(q, start_pos, spec_.rope_theta, spec_.rope_scaling) : q;
  if (k_proj) {                       // two projections, two streams
    s.k = split_heads(k_proj(x), G);  // [B, T, G, d]
    if (spec_.qk_norm) s.k = k_norm(s.k);
    s.k = rope ? apply_rope(s.k, start_pos, spec_.rope_theta, spec_.rope_scaling) : s.k;
    s.v = split_heads(v_proj(x), G);
  } else if (qk_proj) {  // Q=K: the key is the query
    s.k = s.q;
    s.v = split_heads(v_proj(x), G);
  } else {  // K=V: one content stream C
    const torch::Tensor content = kv_proj ? split_heads(kv_proj(x), G) : q;  // [B, T, G, d]
    s.k = keys_from_content(content, start_pos);
    s.v = content;
  }
  return s;
}

torch::Tensor StandardAttentionImpl::attend(const torch::Tensor& q, const torch::Tensor& k,
                                            const torch::Tensor& v, int64_t mask_offset) {
  const int64_t G = spec_.n_groups;
  const double scale = spec_.softmax_scale();
  if (!is_plus() && runs_fused(q, k.size(1), mask_offset)) {
    return o_proj(fused_attention(q, k, v, scale).flatten(2));  // [B, T, H·d] -> [B, T, D]
  }
  // [B, G, H/G, Tq, d] · [B, G, 1, d, Tk] -> [B, G, H/G, Tq, Tk]
  torch::Tensor scores =
      torch::matmul(group_queries(q, G), group_keys(k).transpose(-1, -2)) * scale;
  if (is_plus()) {
    // 1×1 conv of (S broadcast over m channels + P): Σ_c w_hc (S + P_c) + b_h, computed as
    // S·Σ_c w_hc + (P·w_h) + b_h, the same sum without materialising [B, H, n, n, m].
    const int64_t n = scores.size(-1), H = spec_.n_heads;
    const torch::Tensor P = sinusoid_2d(n, spec_.bias_channels, scores.options());  // [n, n, m]
    const torch::Tensor bias = torch::einsum("ijc,hc->hij", {P, pos_mix_weight}) +
                               pos_mix_bias.view({H, 1, 1});  // [H, n, n]
    const torch::Tensor gain = pos_mix_weight.sum(-1);        // [H]
    const int64_t per_group = H / G;
    scores = scores * gain.view({G, per_group, 1, 1}) + bias.view({G, per_group, n, n});
  }
  const torch::Tensor p = softmax_scores(scores, mask_offset);
  return o_proj(merge_grouped_heads(torch::matmul(p, group_keys(v))));
}

torch::Tensor StandardAttentionImpl::scores(const torch::Tensor& x) {
  const Streams s = project(x, 0);
  const int64_t G = spec_.n_groups;
  const double scale = spec_.softmax_scale();
  const torch::Tensor grouped =
      torch::matmul(group_queries(s.q, G), group_keys(s.k).transpose(-1, -2)) * scale;
  return grouped.flatten(1, 2);
}

torch::Tensor StandardAttentionImpl::forward(const torch::Tensor& x, int64_t start_pos) {
  const Streams s = project(x, start_pos);
  return attend(s.q, s.k, s.v, /*mask_offset=*/0);
}

std::vector<torch::Tensor> StandardAttentionImpl::cache_rows(const torch::Tensor& x,
                                                             int64_t start_pos) {
  if (is_plus()) return AttentionImpl::cache_rows(x, start_pos);
  const Streams s = project(x, start_pos);
  if (spec_.shares_kv()) return {s.v};  // C, unrotated: the kernel rotates on read
  return {s.k, s.v};
}

torch::Tensor StandardAttentionImpl::forward_from_cache(const torch::Tensor& x,
                                                        const std::vector<torch::Tensor>& rows,
                                                        int64_t start_pos) {
  if (is_plus()) return AttentionImpl::forward_from_cache(x, rows, start_pos);
  const torch::Tensor q0 = project_query(x);
  const torch::Tensor q = spec_.pos == PosScheme::kRope
                              ? apply_rope(q0, start_pos, spec_.rope_theta, spec_.rope_scaling)
                              : q0;
  if (spec_.shares_kv()) {
    const torch::Tensor& content = rows.at(0);  // [B, Tk, G, d]
    return attend(q, keys_from_content(content, 0), content, start_pos);
  }
  return attend(q, rows.at(0), rows.at(1), start_pos);
}

AttentionImpl::DecodeQuery StandardAttentionImpl::decode_query(const torch::Tensor& x,
                                                               int64_t start_pos) {
  if (is_plus()) return AttentionImpl::decode_query(x, start_pos);
  const torch::Tensor q = project_query(x);
  DecodeQuery out;
  out.q = spec_.pos == PosScheme::kRope
              ? apply_rope(q, start_pos, spec_.rope_theta, spec_.rope_scaling)
              : q;
  out.scale = spec_.softmax_scale();
  return out;
}

torch::Tensor StandardAttentionImpl::decode_output(const torch::Tensor& attended) {
  return o_proj(attended.flatten(2));
}

AttentionImpl::ProjectionWeights StandardAttentionImpl::projection_weights() const {
  auto weight = [](const Linear& l) { return l ? l->weight.detach() : torch::Tensor(); };
  ProjectionWeights p;
  p.q = q_proj ? weight(q_proj) : qk_proj ? weight(qk_proj) : weight(qkv_proj);
  p.k = k_proj    ? weight(k_proj)
        : qk_proj ? weight(qk_proj)
        : kv_proj ? weight(kv_proj)
                  : weight(qkv_proj);
  p.v = v_proj ? weight(v_proj) : kv_proj ? weight(kv_proj) : weight(qkv_proj);
  return p;
}

std::shared_ptr<AttentionImpl> make_standard_attention(const AttentionSpec& spec,
                                                       const torch::TensorOptions& options) {
  return std::make_shared<StandardAttentionImpl>(spec, options);
}

}  // namespace kvlab::nn
