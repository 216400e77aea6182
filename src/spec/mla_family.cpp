// mla: DeepSeek-V2's multi-head latent attention. One latent row c of d_c and one decoupled
// RoPE key of d_r are cached per token; W_uk and W_uv are absorbed at decode.
#include "spec/attention_family.h"

namespace kvlab {
namespace {

using family_detail::linear_params;
using family_detail::norm_params;
using family_detail::num;
using family_detail::require;

// Per-token MACs of the query path: full rank, or down to d_q and back up.
Exact query_macs(const AttentionSpec& s) {
  const int64_t q_out = s.n_heads * (s.nope_dim + s.rope_dim);
  if (s.q_latent_dim == 0) return Exact(s.d_model) * q_out;
  return Exact(s.d_model) * s.q_latent_dim + Exact(s.q_latent_dim) * q_out;
}

// Per token, in both forms: the query, the latent and rope key, the output projection.
Exact mla_projection_macs(const AttentionSpec& s) {
  return query_macs(s) + Exact(s.d_model) * (s.latent_dim + s.rope_dim) +
         Exact(s.n_heads * s.value_dim) * s.d_model;
}

class MlaFamily final : public AttentionFamily {
 public:
  std::string_view name() const override { return "mla"; }
  std::vector<std::string_view> options(const AttentionSpec&) const override {
    return {"dc", "dr", "dn", "dv", "dq", "plainlatent"};
  }

  void set_defaults(AttentionSpec& spec) const override {
    spec.latent_dim = 4 * spec.head_dim;
    spec.rope_dim = spec.head_dim / 2;
    spec.nope_dim = spec.head_dim;
    spec.value_dim = spec.head_dim;
    spec.pos = PosScheme::kDrope;
  }

  std::vector<std::string> option_text(const AttentionSpec& s) const override {
    std::vector<std::string> items = {"dc=" + num(s.latent_dim), "dr=" + num(s.rope_dim)};
    if (s.nope_dim != s.head_dim) items.push_back("dn=" + num(s.nope_dim));
    if (s.value_dim != s.head_dim) items.push_back("dv=" + num(s.value_dim));
    if (s.q_latent_dim != 0) items.push_back("dq=" + num(s.q_latent_dim));
    if (s.plain_latent) items.push_back("plainlatent");
    return items;
  }

  void validate(const AttentionSpec& s) const override {
    family_detail::require_unset(s, {"dc", "dr", "dn", "dv", "dq", "plainlatent"});
    require(s.latent_dim > 0, "dc", "latent width must be > 0");
    require(s.nope_dim > 0, "dn", "content width must be > 0");
    require(s.value_dim > 0, "dv", "value width must be > 0");
    require(s.rope_dim > 0, "dr", "mla needs its decoupled RoPE key: dr must be > 0");
    require(s.q_latent_dim >= 0, "dq", "must be >= 0 (0 = full-rank query)");
    require(s.pos == PosScheme::kDrope, "pos", "mla uses decoupled RoPE");
    require(s.rope_dim % 2 == 0, "dr",
            "RoPE rotates pairs of channels, so dr must be even, got " + num(s.rope_dim));
    require(s.rope_theta > 0, "rope_theta", "must be > 0");
  }

  bool shares_kv(const AttentionSpec&) const override { return false; }
  int64_t qk_dim(const AttentionSpec& s) const override { return s.nope_dim + s.rope_dim; }
  int64_t value_head_dim(const AttentionSpec& s) const override { return s.value_dim; }

  CacheLayout cache_layout(const AttentionSpec& s) const override {
    CacheLayout layout;
    layout.dtype = s.cache_dtype;
    layout.kernel = DecodeKernel::kOneStream;
    layout.streams = {{StreamRole::kContent, 1, s.latent_dim}, {StreamRole::kRope, 1, s.rope_dim}};
    return layout;
  }

  Exact param_count(const AttentionSpec& s) const override {
    const int64_t D = s.d_model, H = s.n_heads;
    const bool in_bias = s.bias != BiasKind::kNone;
    const bool all_bias = s.bias == BiasKind::kAll;
    const int64_t q_out = H * (s.nope_dim + s.rope_dim);
    Exact params = s.q_latent_dim == 0 ? linear_params(D, q_out, in_bias)
                                       : linear_params(D, s.q_latent_dim, in_bias) +
                                             norm_params(s.norm, s.q_latent_dim) +
                                             linear_params(s.q_latent_dim, q_out, all_bias);
    params += linear_params(D, s.latent_dim + s.rope_dim, in_bias) +
              (s.plain_latent ? Exact(0) : norm_params(s.norm, s.latent_dim)) +
              linear_params(s.latent_dim, H * (s.nope_dim + s.value_dim), all_bias);
    return params + linear_params(H * s.value_dim, D, all_bias);
  }

  AttnMacs prefill_macs(const AttentionSpec& s, int64_t n_tokens) const override {
    const Exact n(n_tokens);
    const int64_t H = s.n_heads;
    AttnMacs macs;
    // explicit form: the up-projections of every token's latent
    macs.projections =
        n * (mla_projection_macs(s) + Exact(s.latent_dim) * (H * (s.nope_dim + s.value_dim)));
    macs.mixing = n * n * H * (s.nope_dim + s.rope_dim + s.value_dim);
    return macs;
  }

  AttnMacs decode_macs(const AttentionSpec& s, int64_t context) const override {
    const int64_t H = s.n_heads;
    AttnMacs macs;
    // absorbed: q̃_h = W_uk,hᵀ q_h^nope before, W_uv,h after the weighted sum over c
    macs.projections = mla_projection_macs(s) + Exact(H) * s.nope_dim * s.latent_dim +
                       Exact(H) * s.latent_dim * s.value_dim;
    macs.mixing = Exact(context) * H * (2 * s.latent_dim + s.rope_dim);
    return macs;
  }
};

}  // namespace

const AttentionFamily& mla_family() {
  static const MlaFamily family;
  return family;
}

}  // namespace kvlab
