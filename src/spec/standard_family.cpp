// The standard family: MHA, GQA, MQA and the projection-sharing variants (seed 003), with the
// '+' forms. One table row per variant says which projections it has; everything else is
// computed from the row.
#include <stdexcept>

#include "spec/attention_family.h"

namespace kvlab {
namespace {

using family_detail::linear_params;
using family_detail::num;
using family_detail::require;

constexpr int64_t kDefaultBiasChannels = 10;  // m of the '+' variants: seed 003 §4.1 uses 10

// A variant's projections: one H·d_h wide (the query, or the shared Q=K / Q=K=V), plus
// `group_projections` of G·d_h (GQA's K and V; the shared K=V of q-gqa; for the variants with
// one group per head, G = H and the second H·d_h projection is one of these).
struct StandardForm {
  AttnVariant variant;
  int group_projections;
  bool queries_are_keys;  // one projection is query and key (Q=K)
  bool shares_kv;         // one projection and one cached stream are key and value
  bool plus;              // 2-D positional bias, non-causal
};

constexpr StandardForm kForms[] = {
    {AttnVariant::kMha, 2, false, false, false},   {AttnVariant::kGqa, 2, false, false, false},
    {AttnVariant::kMqa, 2, false, false, false},   {AttnVariant::kQkV, 1, true, false, false},
    {AttnVariant::kQKv, 1, false, true, false},    {AttnVariant::kQkv1, 0, true, true, false},
    {AttnVariant::kQGqa, 1, false, true, false},   {AttnVariant::kQMqa, 1, false, true, false},
    {AttnVariant::kQkVPlus, 1, true, false, true}, {AttnVariant::kQkv1Plus, 0, true, true, true},
};

const StandardForm& form(const AttentionSpec& spec) {
  for (const StandardForm& f : kForms) {
    if (f.variant == spec.variant) return f;
  }
  throw std::logic_error("the standard family has no form for " +
                         std::string(attn_variant_id(spec.variant)));
}

class StandardFamily final : public AttentionFamily {
 public:
  std::string_view name() const override { return "standard"; }
  std::vector<std::string_view> options(const AttentionSpec& spec) const override {
    const StandardForm& f = form(spec);
    if (f.plus) return {"m"};
    if (f.shares_kv) return {"knorm"};
    if (!f.queries_are_keys) return {"qknorm"};
    return {};
  }

  void set_defaults(AttentionSpec& spec) const override {
    if (form(spec).plus) {
      spec.bias_channels = kDefaultBiasChannels;
      spec.pos = PosScheme::kBias2d;
    }
  }

  std::vector<std::string> option_text(const AttentionSpec& spec) const override {
    std::vector<std::string> items;
    if (form(spec).plus && spec.bias_channels != kDefaultBiasChannels) {
      items.push_back("m=" + num(spec.bias_channels));
    }
    if (spec.k_norm) items.push_back("knorm");
    if (spec.qk_norm) items.push_back("qknorm");
    return items;
  }

  void validate(const AttentionSpec& spec) const override {
    const StandardForm& f = form(spec);
    const std::string id(attn_variant_id(spec.variant));
    family_detail::require_unset(spec, {"m", "knorm", "qknorm"});
    if (f.plus) {
      require(!spec.causal, "attn",
              id + " adds a 2-D positional bias for non-causal models only (seed 003 §3.1); "
                   "a decoder is causal: use an encoder, vit or set model");
      require(spec.bias_channels > 0 && spec.bias_channels % 2 == 0, "m",
              "channels of the 2-D positional tensor must be positive and even (half encode the "
              "row, half the column), got " +
                  num(spec.bias_channels));
      require(spec.pos == PosScheme::kBias2d, "pos", id + " uses the 2-D positional bias");
    } else {
      require(spec.bias_channels == 0, "m", "the 2-D positional tensor applies to qk-v+ and qkv1+");
      family_detail::require_model_positions(spec);
    }
    if (spec.pos == PosScheme::kRope) {
      require(spec.head_dim % 2 == 0, "head_dim",
              "RoPE rotates pairs of channels, so the rotated width must be even, got " +
                  num(spec.head_dim));
    }
    if (spec.k_norm) {
      require(f.shares_kv && spec.pos == PosScheme::kRope && !f.plus, "knorm",
              "K = RoPE(RMSNorm(C)) applies to the shared K=V layout with RoPE positions "
              "(q-kv, qkv1, q-gqa, q-mqa on a rope model); this model's positions are " +
                  std::string(pos_scheme_name(spec.pos)));
    }
    if (spec.qk_norm) {
      require(!f.shares_kv && !f.queries_are_keys && !f.plus, "qknorm",
              "per-head q and k norms apply to variants with their own key projection "
              "(mha, gqa, mqa)");
    }
  }

  bool shares_kv(const AttentionSpec& spec) const override { return form(spec).shares_kv; }
  int64_t qk_dim(const AttentionSpec& spec) const override { return spec.head_dim; }
  int64_t value_head_dim(const AttentionSpec& spec) const override { return spec.head_dim; }

  CacheLayout cache_layout(const AttentionSpec& spec) const override {
    const StandardForm& f = form(spec);
    CacheLayout layout;
    layout.dtype = spec.cache_dtype;
    if (f.plus) {
      layout.kernel = DecodeKernel::kNone;
    } else if (f.shares_kv) {
      layout.kernel = DecodeKernel::kOneStream;
      layout.streams = {{StreamRole::kContent, spec.n_groups, spec.head_dim}};
      layout.rope_on_read = spec.pos == PosScheme::kRope;
      layout.norm_on_read = spec.k_norm;
    } else {
      layout.kernel = DecodeKernel::kTwoStream;
      layout.streams = {{StreamRole::kKey, spec.n_groups, spec.head_dim},
                        {StreamRole::kValue, spec.n_groups, spec.head_dim}};
    }
    return layout;
  }

  Exact param_count(const AttentionSpec& spec) const override {
    const int64_t D = spec.d_model, H = spec.n_heads, d = spec.head_dim, G = spec.n_groups;
    const bool in_bias = spec.bias != BiasKind::kNone;
    Exact params = linear_params(D, H * d, in_bias) +
                   Exact(form(spec).group_projections) * linear_params(D, G * d, in_bias);
    if (form(spec).plus) params += Exact(H) * (spec.bias_channels + 1);  // 1×1 conv per head
    if (spec.k_norm) params += d;       // RMSNorm weights on the cached rows
    if (spec.qk_norm) params += 2 * d;  // q and k RMSNorm weights, shared by the heads
    return params + linear_params(H * d, D, spec.bias == BiasKind::kAll);
  }

  AttnMacs prefill_macs(const AttentionSpec& spec, int64_t n_tokens) const override {
    const Exact n(n_tokens);
    AttnMacs macs;
    macs.projections = n * projection_macs(spec);
    macs.mixing = n * n * spec.n_heads * (2 * spec.head_dim);
    if (form(spec).plus) macs.mixing += n * n * spec.n_heads * spec.bias_channels;
    return macs;
  }

  AttnMacs decode_macs(const AttentionSpec& spec, int64_t context) const override {
    AttnMacs macs;
    if (form(spec).plus) return macs;  // nothing is cached, nothing decodes
    macs.projections = projection_macs(spec);
    macs.mixing = Exact(context) * spec.n_heads * (2 * spec.head_dim);
    return macs;
  }

 private:
  // Per token: each projection once (a shared one is computed once and used twice), and the
  // output projection.
  static Exact projection_macs(const AttentionSpec& spec) {
    const int64_t D = spec.d_model, H = spec.n_heads, d = spec.head_dim, G = spec.n_groups;
    return Exact(D) * (H * d) + Exact(form(spec).group_projections) * D * (G * d) +
           Exact(H * d) * D;
  }
};

}  // namespace

bool standard_queries_are_keys(const AttentionSpec& spec) { return form(spec).queries_are_keys; }

const AttentionFamily& standard_family() {
  static const StandardFamily family;
  return family;
}

}  // namespace kvlab
