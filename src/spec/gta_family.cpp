// gta:G[,dr=]: grouped-tied attention (Zadouri, Strauss, Dao 2025). One projection gives a tied
// state of G heads × d_h, cached; head h's key is [the first d_h − d_r channels of its group's
// state ; one RoPE key of d_r shared by all heads], its value the whole state. That is GVA with
// M_h fixed to a channel selection (d_n = d_h − d_r), so it caches and decodes as GVA does.
#include "spec/attention_family.h"

namespace kvlab {
namespace {

using family_detail::grouped_value_projection_macs;
using family_detail::linear_params;
using family_detail::num;
using family_detail::require;

class GtaFamily final : public AttentionFamily {
 public:
  std::string_view name() const override { return "gta"; }
  std::vector<std::string_view> options(const AttentionSpec&) const override { return {"dr"}; }

  void set_defaults(AttentionSpec& spec) const override {
    spec.rope_dim = spec.head_dim / 2;  // the paper's d_r
    spec.pos = PosScheme::kDrope;
  }

  void finish_parse(AttentionSpec& spec) const override {
    spec.nope_dim = spec.head_dim - spec.rope_dim;
  }

  std::vector<std::string> option_text(const AttentionSpec& s) const override {
    return {"dr=" + num(s.rope_dim)};
  }

  void validate(const AttentionSpec& s) const override {
    family_detail::require_unset(s, {"dr", "dn"});
    require(s.rope_dim > 0 && s.rope_dim < s.head_dim, "dr",
            "gta's key is the tied state's first d_h - d_r channels and a RoPE key of d_r: dr "
            "must be between 1 and d_h - 1 (" +
                num(s.head_dim - 1) + "), got " + num(s.rope_dim));
    require(s.rope_dim % 2 == 0, "dr",
            "RoPE rotates pairs of channels, so dr must be even, got " + num(s.rope_dim));
    require(s.nope_dim == s.head_dim - s.rope_dim, "dn",
            "gta's content key is d_h - d_r = " + num(s.head_dim - s.rope_dim) + " channels");
    require(s.pos == PosScheme::kDrope, "pos", "gta uses decoupled RoPE");
    require(s.rope_theta > 0, "rope_theta", "must be > 0");
  }

  bool shares_kv(const AttentionSpec&) const override { return false; }
  int64_t qk_dim(const AttentionSpec& s) const override { return s.nope_dim + s.rope_dim; }
  int64_t value_head_dim(const AttentionSpec& s) const override { return s.head_dim; }

  CacheLayout cache_layout(const AttentionSpec& s) const override {
    CacheLayout layout;
    layout.dtype = s.cache_dtype;
    layout.kernel = DecodeKernel::kOneStream;
    layout.streams = {{StreamRole::kContent, s.n_groups, s.head_dim},
                      {StreamRole::kRope, 1, s.rope_dim}};
    return layout;
  }

  Exact param_count(const AttentionSpec& s) const override {
    const int64_t D = s.d_model, H = s.n_heads;
    const bool in_bias = s.bias != BiasKind::kNone;
    return linear_params(D, H * (s.nope_dim + s.rope_dim), in_bias) +
           linear_params(D, s.n_groups * s.head_dim, in_bias) +
           linear_params(D, s.rope_dim, in_bias) +
           linear_params(H * s.head_dim, D, s.bias == BiasKind::kAll);
  }

  AttnMacs prefill_macs(const AttentionSpec& s, int64_t n_tokens) const override {
    const Exact n(n_tokens);
    AttnMacs macs;
    macs.projections =
        n * grouped_value_projection_macs(s);  // the key is a slice: no multiply-adds
    macs.mixing = n * n * s.n_heads * (s.nope_dim + s.rope_dim + s.head_dim);
    return macs;
  }

  AttnMacs decode_macs(const AttentionSpec& s, int64_t context) const override {
    AttnMacs macs;
    // q̃_h = [q_h^nope ; 0]: the query padded to the state's width, no multiply-adds
    macs.projections = grouped_value_projection_macs(s);
    macs.mixing = Exact(context) * s.n_heads * (2 * s.head_dim + s.rope_dim);
    return macs;
  }
};

}  // namespace

const AttentionFamily& gta_family() {
  static const GtaFamily family;
  return family;
}

}  // namespace kvlab
