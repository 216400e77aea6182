// gva:G[,dr=]: grouped value attention. G value heads and one shared RoPE key of d_r are
// cached; each head's key is rebuilt by a learned map M_h, folded into its query at decode.
#include "spec/attention_family.h"

namespace kvlab {
namespace {

using family_detail::grouped_value_projection_macs;
using family_detail::linear_params;
using family_detail::num;
using family_detail::require;

constexpr int64_t kDefaultRopeDim = 16;  // the GVA paper's proposed d_r

class GvaFamily final : public AttentionFamily {
 public:
  std::string_view name() const override { return "gva"; }
  std::vector<std::string_view> options(const AttentionSpec&) const override {
    return {"dr", "dn", "init", "qnorm"};
  }

  void set_defaults(AttentionSpec& spec) const override {
    spec.rope_dim = kDefaultRopeDim;
    spec.nope_dim = spec.head_dim;
  }

  void finish_parse(AttentionSpec& spec) const override {
    // Without the decoupled slice GVA rotates its reconstructed key over the full width.
    spec.pos = spec.rope_dim > 0 ? PosScheme::kDrope : PosScheme::kRope;
  }

  std::vector<std::string> option_text(const AttentionSpec& s) const override {
    std::vector<std::string> items = {"dr=" + num(s.rope_dim)};
    if (s.nope_dim != s.head_dim) items.push_back("dn=" + num(s.nope_dim));
    if (s.m_init != GvaInit::kBaseline) {
      items.push_back("init=" + std::string(gva_init_name(s.m_init)));
    }
    if (s.q_norm) items.push_back("qnorm");
    return items;
  }

  void validate(const AttentionSpec& s) const override {
    family_detail::require_unset(s, {"dr", "dn", "init", "qnorm"});
    require(s.nope_dim > 0, "dn", "content width must be > 0");
    require(s.rope_dim >= 0, "dr", "must be >= 0");
    require(s.pos == (s.rope_dim > 0 ? PosScheme::kDrope : PosScheme::kRope), "pos",
            "gva uses decoupled RoPE when dr > 0 and full-width RoPE when dr = 0");
    if (s.rope_dim > 0) {
      require(s.rope_dim % 2 == 0, "dr",
              "RoPE rotates pairs of channels, so dr must be even, got " + num(s.rope_dim));
    } else {
      require(s.nope_dim % 2 == 0, "dn",
              "RoPE rotates pairs of channels, so the rotated width must be even, got " +
                  num(s.nope_dim));
    }
    require(s.rope_theta > 0, "rope_theta", "must be > 0");
  }

  bool shares_kv(const AttentionSpec&) const override { return false; }
  int64_t qk_dim(const AttentionSpec& s) const override { return s.nope_dim + s.rope_dim; }
  int64_t value_head_dim(const AttentionSpec& s) const override { return s.head_dim; }

  CacheLayout cache_layout(const AttentionSpec& s) const override {
    CacheLayout layout;
    layout.dtype = s.cache_dtype;
    if (s.rope_dim > 0) {
      layout.kernel = DecodeKernel::kOneStream;
      layout.streams = {{StreamRole::kContent, s.n_groups, s.head_dim},
                        {StreamRole::kRope, 1, s.rope_dim}};
    } else {
      layout.kernel = DecodeKernel::kReconstructKeys;
      layout.streams = {{StreamRole::kContent, s.n_groups, s.head_dim}};
    }
    return layout;
  }

  Exact param_count(const AttentionSpec& s) const override {
    const int64_t D = s.d_model, H = s.n_heads, d = s.head_dim;
    const bool in_bias = s.bias != BiasKind::kNone;
    return linear_params(D, H * (s.nope_dim + s.rope_dim), in_bias) +
           linear_params(D, s.n_groups * d, in_bias) +
           (s.rope_dim > 0 ? linear_params(D, s.rope_dim, in_bias) : Exact(0)) +
           Exact(H) * d * s.nope_dim + (s.q_norm ? Exact(s.nope_dim) : Exact(0)) +
           linear_params(H * d, D, s.bias == BiasKind::kAll);
  }

  AttnMacs prefill_macs(const AttentionSpec& s, int64_t n_tokens) const override {
    const Exact n(n_tokens);
    const int64_t H = s.n_heads;
    AttnMacs macs;
    // k_h^nope = v_g(h) M_h for every token
    macs.projections = n * (grouped_value_projection_macs(s) + Exact(H) * s.head_dim * s.nope_dim);
    macs.mixing = n * n * H * (s.nope_dim + s.rope_dim + s.head_dim);
    return macs;
  }

  AttnMacs decode_macs(const AttentionSpec& s, int64_t context) const override {
    const Exact T(context);
    const int64_t H = s.n_heads, d = s.head_dim;
    AttnMacs macs;
    macs.projections = grouped_value_projection_macs(s);
    if (s.rope_dim > 0) {
      macs.projections += Exact(H) * s.nope_dim * d;  // q̃_h = q_h^nope M_hᵀ
      macs.mixing = T * H * (2 * d + s.rope_dim);
    } else {
      // RoPE sits between q and M_h: every cached position's key is rebuilt per head.
      macs.mixing = T * H * d * s.nope_dim + T * H * (s.nope_dim + d);
    }
    return macs;
  }
};

}  // namespace

const AttentionFamily& gva_family() {
  static const GvaFamily family;
  return family;
}

}  // namespace kvlab
