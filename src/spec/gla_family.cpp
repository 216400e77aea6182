// gla:hc=C[,dc=,dr=]: grouped latent attention (Zadouri, Strauss, Dao 2025). MLA whose latent
// is split into C latent heads of d_c, each with its own RoPE key of d_r; query head h reads
// latent head h / (H/C); W_uk and W_uv are absorbed per head as in MLA. Each latent head is
// cached as one row [c_g ; RoPE(k^rope_g)] of d_c + d_r that the one-stream kernel reads as the
// key, and as the value (the weighted sum's last d_r channels meet zero columns of W_uv).
#include "spec/attention_family.h"

namespace kvlab {
namespace {

using family_detail::linear_params;
using family_detail::norm_params;
using family_detail::num;
using family_detail::require;

// Per token, in both forms: the query, the latent rows and their rope keys, the output.
Exact gla_projection_macs(const AttentionSpec& s) {
  const int64_t D = s.d_model, H = s.n_heads;
  return Exact(D) * (H * (s.nope_dim + s.rope_dim)) +
         Exact(D) * (s.n_groups * (s.latent_dim + s.rope_dim)) + Exact(H * s.value_dim) * D;
}

class GlaFamily final : public AttentionFamily {
 public:
  std::string_view name() const override { return "gla"; }
  std::vector<std::string_view> options(const AttentionSpec&) const override {
    return {"hc", "dc", "dr"};
  }

  void set_defaults(AttentionSpec& spec) const override {
    spec.latent_dim = 2 * spec.head_dim;  // the paper's d_c = 2·d_h per latent head
    spec.rope_dim = spec.head_dim / 2;
    spec.nope_dim = spec.head_dim;
    spec.value_dim = spec.head_dim;
    spec.pos = PosScheme::kDrope;
  }

  std::vector<std::string> option_text(const AttentionSpec& s) const override {
    return {"hc=" + num(s.n_groups), "dc=" + num(s.latent_dim), "dr=" + num(s.rope_dim)};
  }

  void validate(const AttentionSpec& s) const override {
    family_detail::require_unset(s, {"dc", "dr", "dn", "dv"});
    require(s.latent_dim > 0, "dc", "latent width must be > 0");
    require(s.rope_dim > 0, "dr", "gla needs a RoPE key per latent head: dr must be > 0");
    require(s.rope_dim % 2 == 0, "dr",
            "RoPE rotates pairs of channels, so dr must be even, got " + num(s.rope_dim));
    require(s.nope_dim == s.head_dim && s.value_dim == s.head_dim, "dn",
            "gla's query content and value widths are d_h");
    require(s.pos == PosScheme::kDrope, "pos", "gla uses decoupled RoPE");
    require(s.rope_theta > 0, "rope_theta", "must be > 0");
  }

  bool shares_kv(const AttentionSpec&) const override { return false; }
  int64_t qk_dim(const AttentionSpec& s) const override { return s.nope_dim + s.rope_dim; }
  int64_t value_head_dim(const AttentionSpec& s) const override { return s.value_dim; }

  CacheLayout cache_layout(const AttentionSpec& s) const override {
    CacheLayout layout;
    layout.dtype = s.cache_dtype;
    layout.kernel = DecodeKernel::kOneStream;
    layout.streams = {{StreamRole::kContent, s.n_groups, s.latent_dim + s.rope_dim}};
    return layout;
  }

  Exact param_count(const AttentionSpec& s) const override {
    const int64_t D = s.d_model, H = s.n_heads;
    const bool in_bias = s.bias != BiasKind::kNone;
    const bool all_bias = s.bias == BiasKind::kAll;
    return linear_params(D, H * (s.nope_dim + s.rope_dim), in_bias) +
           linear_params(D, s.n_groups * (s.latent_dim + s.rope_dim), in_bias) +
           norm_params(s.norm, s.latent_dim) +  // one norm, applied to every latent head
           linear_params(s.latent_dim, H * (s.nope_dim + s.value_dim), all_bias) +
           linear_params(H * s.value_dim, D, all_bias);
  }

  AttnMacs prefill_macs(const AttentionSpec& s, int64_t n_tokens) const override {
    const Exact n(n_tokens);
    const int64_t H = s.n_heads;
    AttnMacs macs;
    // explicit form: every head's key and value up-projected from its latent head
    macs.projections =
        n * (gla_projection_macs(s) + Exact(s.latent_dim) * (H * (s.nope_dim + s.value_dim)));
    macs.mixing = n * n * H * (s.nope_dim + s.rope_dim + s.value_dim);
    return macs;
  }

  AttnMacs decode_macs(const AttentionSpec& s, int64_t context) const override {
    const int64_t H = s.n_heads, row = s.latent_dim + s.rope_dim;
    AttnMacs macs;
    // absorbed: q̃_h = [W_uk,hᵀ q_h^nope ; q_h^rope] before, W_uv,h after the weighted sum
    macs.projections = gla_projection_macs(s) + Exact(H) * s.nope_dim * s.latent_dim +
                       Exact(H) * s.latent_dim * s.value_dim;
    macs.mixing = Exact(context) * H * (2 * row);  // scores and sums over whole rows
    return macs;
  }
};

}  // namespace

const AttentionFamily& gla_family() {
  static const GlaFamily family;
  return family;
}

}  // namespace kvlab
