// Cache layout, parameters and MACs of one attention layer, all from the AttentionSpec.
#include "spec/attention_spec.h"

namespace kvlab {
namespace {

Exact linear_params(int64_t in, int64_t out, bool has_bias) {
  return Exact(in) * out + (has_bias ? out : 0);
}

Exact norm_params(NormKind norm, int64_t width) {
  return norm == NormKind::kLayerNorm ? Exact(2) * width : Exact(width);
}

// Per-token MACs of the query path of mla: full rank, or down to d_q and back up.
Exact mla_query_macs(const AttentionSpec& s) {
  const int64_t q_out = s.n_heads * (s.nope_dim + s.rope_dim);
  if (s.q_latent_dim == 0) return Exact(s.d_model) * q_out;
  return Exact(s.d_model) * s.q_latent_dim + Exact(s.q_latent_dim) * q_out;
}

// Per-token MACs of the projections every variant runs on each input token, not counting
// what mla and gva do differently in the explicit (prefill) and absorbed (decode) forms.
Exact common_projection_macs(const AttentionSpec& s) {
  const int64_t D = s.d_model, H = s.n_heads, d = s.head_dim, G = s.n_groups;
  const Exact out = Exact(s.attn_out_dim()) * D;
  switch (s.variant) {
    case AttnVariant::kMha:
    case AttnVariant::kGqa:
    case AttnVariant::kMqa:
      return Exact(D) * (H * d) + Exact(2) * D * (G * d) + out;
    case AttnVariant::kQkV:
    case AttnVariant::kQkVPlus:
    case AttnVariant::kQKv:
      // The shared projection is computed once and used twice: two matmuls, not three.
      return Exact(2) * D * (H * d) + out;
    case AttnVariant::kQkv1:
    case AttnVariant::kQkv1Plus:
    case AttnVariant::kLinear:
      return Exact(D) * (H * d) + out;
    case AttnVariant::kQGqa:
    case AttnVariant::kQMqa:
      return Exact(D) * (H * d) + Exact(D) * (G * d) + out;
    case AttnVariant::kMla:
      return mla_query_macs(s) + Exact(D) * (s.latent_dim + s.rope_dim) + out;
    case AttnVariant::kGva:
      return Exact(D) * (H * (s.nope_dim + s.rope_dim)) + Exact(D) * (G * d) +
             Exact(D) * s.rope_dim + out;
  }
  return 0;
}

// Per-head, per-(query, key) MACs of the linear attention recurrence: S += φ(z) zᵀ,
// y = φ(z)ᵀ S, normaliser φ(z)ᵀ Σφ(z).
Exact linear_state_macs(const AttentionSpec& s) {
  return Exact(s.n_heads) * (Exact(2) * s.head_dim * s.head_dim + s.head_dim);
}

}  // namespace

CacheLayout AttentionSpec::cache_layout() const {
  CacheLayout layout;
  layout.dtype = cache_dtype;
  switch (variant) {
    case AttnVariant::kMha:
    case AttnVariant::kGqa:
    case AttnVariant::kMqa:
    case AttnVariant::kQkV:
      layout.kernel = DecodeKernel::kTwoStream;
      layout.streams = {{"k", n_groups, head_dim}, {"v", n_groups, head_dim}};
      break;
    case AttnVariant::kQKv:
    case AttnVariant::kQkv1:
    case AttnVariant::kQGqa:
    case AttnVariant::kQMqa:
      layout.kernel = DecodeKernel::kOneStream;
      layout.streams = {{"c", n_groups, head_dim}};
      layout.rope_on_read = pos == PosScheme::kRope;
      layout.norm_on_read = k_norm;
      break;
    case AttnVariant::kMla:
      layout.kernel = DecodeKernel::kOneStream;
      layout.streams = {{"c", 1, latent_dim}, {"kr", 1, rope_dim}};
      break;
    case AttnVariant::kGva:
      if (rope_dim > 0) {
        layout.kernel = DecodeKernel::kOneStream;
        layout.streams = {{"c", n_groups, head_dim}, {"kr", 1, rope_dim}};
      } else {
        layout.kernel = DecodeKernel::kReconstructKeys;
        layout.streams = {{"c", n_groups, head_dim}};
      }
      break;
    case AttnVariant::kQkVPlus:
    case AttnVariant::kQkv1Plus:
      layout.kernel = DecodeKernel::kNone;
      break;
    case AttnVariant::kLinear:
      layout.kernel = DecodeKernel::kRecurrentState;
      layout.state_scalars = n_heads * (head_dim * head_dim + head_dim);
      break;
  }
  return layout;
}

Exact AttentionSpec::param_count() const {
  const int64_t D = d_model, H = n_heads, d = head_dim, G = n_groups;
  const bool in_bias = bias != BiasKind::kNone;  // projections that read the layer input
  const bool all_bias = bias == BiasKind::kAll;
  const Exact out = linear_params(attn_out_dim(), D, all_bias);
  Exact params;
  switch (variant) {
    case AttnVariant::kMha:
    case AttnVariant::kGqa:
    case AttnVariant::kMqa:
      params = linear_params(D, H * d, in_bias) + Exact(2) * linear_params(D, G * d, in_bias);
      break;
    case AttnVariant::kQkV:
    case AttnVariant::kQKv:
    case AttnVariant::kQkVPlus:
      params = Exact(2) * linear_params(D, H * d, in_bias);
      break;
    case AttnVariant::kQkv1:
    case AttnVariant::kQkv1Plus:
    case AttnVariant::kLinear:
      params = linear_params(D, H * d, in_bias);
      break;
    case AttnVariant::kQGqa:
    case AttnVariant::kQMqa:
      params = linear_params(D, H * d, in_bias) + linear_params(D, G * d, in_bias);
      break;
    case AttnVariant::kMla: {
      const int64_t q_out = H * (nope_dim + rope_dim);
      params = q_latent_dim == 0
                   ? linear_params(D, q_out, in_bias)
                   : linear_params(D, q_latent_dim, in_bias) + norm_params(norm, q_latent_dim) +
                         linear_params(q_latent_dim, q_out, all_bias);
      params += linear_params(D, latent_dim + rope_dim, in_bias) + norm_params(norm, latent_dim) +
                linear_params(latent_dim, H * (nope_dim + value_dim), all_bias);
      break;
    }
    case AttnVariant::kGva:
      params = linear_params(D, H * (nope_dim + rope_dim), in_bias) +
               linear_params(D, G * d, in_bias) +
               (rope_dim > 0 ? linear_params(D, rope_dim, in_bias) : Exact(0)) +
               Exact(H) * d * nope_dim + (q_norm ? Exact(nope_dim) : Exact(0));
      break;
  }
  if (variant == AttnVariant::kQkVPlus || variant == AttnVariant::kQkv1Plus) {
    params += Exact(H) * (bias_channels + 1);  // 1×1 conv: m weights and a bias per head
  }
  if (k_norm) params += head_dim;  // RMSNorm weights on the cached rows
  return params + out;
}

AttnMacs AttentionSpec::prefill_macs(int64_t n_tokens) const {
  const Exact n(n_tokens);
  const int64_t H = n_heads;
  AttnMacs macs;
  Exact per_token = common_projection_macs(*this);
  switch (variant) {
    case AttnVariant::kMla:
      per_token += Exact(latent_dim) * (H * (nope_dim + value_dim));  // up-projections
      macs.mixing = n * n * H * (nope_dim + rope_dim + value_dim);
      break;
    case AttnVariant::kGva:
      per_token += Exact(H) * head_dim * nope_dim;  // k_h^nope = v_g(h) M_h
      macs.mixing = n * n * H * (nope_dim + rope_dim + head_dim);
      break;
    case AttnVariant::kLinear:
      macs.mixing = n * linear_state_macs(*this);
      break;
    default:
      macs.mixing = n * n * H * (head_dim + head_dim);
      break;
  }
  if (variant == AttnVariant::kQkVPlus || variant == AttnVariant::kQkv1Plus) {
    macs.mixing += n * n * H * bias_channels;  // the 1×1 conv over m channels
  }
  macs.projections = n * per_token;
  return macs;
}

AttnMacs AttentionSpec::decode_macs(int64_t context) const {
  const Exact T(context);
  const int64_t H = n_heads;
  AttnMacs macs;
  const CacheLayout layout = cache_layout();
  if (layout.kernel == DecodeKernel::kNone) return macs;
  macs.projections = common_projection_macs(*this);
  switch (variant) {
    case AttnVariant::kMla:
      // absorbed: q̃_h = W_uk,hᵀ q_h^nope before, W_uv,h after the weighted sum over c
      macs.projections += Exact(H) * nope_dim * latent_dim + Exact(H) * latent_dim * value_dim;
      macs.mixing = T * H * (latent_dim + rope_dim + latent_dim);
      break;
    case AttnVariant::kGva:
      if (rope_dim > 0) {
        macs.projections += Exact(H) * nope_dim * head_dim;  // q̃_h = q_h^nope M_hᵀ
        macs.mixing = T * H * (head_dim + rope_dim + head_dim);
      } else {
        // RoPE sits between q and M_h: every cached position's key is rebuilt per head.
        macs.mixing = T * H * head_dim * nope_dim + T * H * (nope_dim + head_dim);
      }
      break;
    case AttnVariant::kLinear:
      macs.mixing = linear_state_macs(*this);
      break;
    default:
      macs.mixing = T * H * (head_dim + head_dim);
      break;
  }
  return macs;
}

}  // namespace kvlab
