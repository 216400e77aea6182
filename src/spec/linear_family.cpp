// linear: the Q=K=V collapse into a recurrent state (one W, state S_h = Σ φ(z) zᵀ per head),
// kept in f32 per sequence instead of a per-token cache.
#include "spec/attention_family.h"

namespace kvlab {
namespace {

using family_detail::linear_params;
using family_detail::require;

// Per head and token: S += φ(z) zᵀ, y = φ(z)ᵀ S, normaliser φ(z)ᵀ Σφ(z).
Exact state_macs(const AttentionSpec& s) {
  return Exact(s.n_heads) * (Exact(2) * s.head_dim * s.head_dim + s.head_dim);
}

Exact projection_macs(const AttentionSpec& s) {
  const int64_t HD = s.n_heads * s.head_dim;
  return Exact(s.d_model) * HD + Exact(HD) * s.d_model;
}

class LinearFamily final : public AttentionFamily {
 public:
  std::string_view name() const override { return "linear"; }
  bool takes_rope() const override { return false; }
  std::vector<std::string_view> options(const AttentionSpec&) const override { return {}; }
  void set_defaults(AttentionSpec&) const override {}
  std::vector<std::string> option_text(const AttentionSpec&) const override { return {}; }

  void validate(const AttentionSpec& s) const override {
    family_detail::require_unset(s, {});
    family_detail::require_model_positions(s);
    require(s.pos != PosScheme::kRope, "pos",
            "linear attention takes learned or no positions: RoPE inside its running state is "
            "not implemented");
  }

  bool shares_kv(const AttentionSpec&) const override { return true; }
  int64_t qk_dim(const AttentionSpec& s) const override { return s.head_dim; }
  int64_t value_head_dim(const AttentionSpec& s) const override { return s.head_dim; }

  CacheLayout cache_layout(const AttentionSpec& s) const override {
    CacheLayout layout;
    layout.dtype = s.cache_dtype;
    layout.kernel = DecodeKernel::kRecurrentState;
    layout.state_scalars = s.n_heads * (s.head_dim * s.head_dim + s.head_dim);
    return layout;
  }

  Exact param_count(const AttentionSpec& s) const override {
    const int64_t HD = s.n_heads * s.head_dim;
    return linear_params(s.d_model, HD, s.bias != BiasKind::kNone) +
           linear_params(HD, s.d_model, s.bias == BiasKind::kAll);
  }

  AttnMacs prefill_macs(const AttentionSpec& s, int64_t n_tokens) const override {
    return {Exact(n_tokens) * projection_macs(s), Exact(n_tokens) * state_macs(s)};
  }

  AttnMacs decode_macs(const AttentionSpec& s, int64_t) const override {
    return {projection_macs(s), state_macs(s)};
  }
};

}  // namespace

const AttentionFamily& linear_family() {
  static const LinearFamily family;
  return family;
}

}  // namespace kvlab
