#include "spec/attention_family.h"

#include <stdexcept>

#include "spec/spec_error.h"

namespace kvlab {

void AttentionFamily::finish_parse(AttentionSpec&) const {}

const AttentionFamily& spec_family(AttnFamily family) {
  switch (family) {
#define KVLAB_ATTENTION_FAMILY(Name, id) \
  case AttnFamily::k##Name:              \
    return id##_family();
#include "spec/attention_families.def"
  }
  throw std::logic_error("attention family without a spec implementation");
}

namespace family_detail {

Exact linear_params(int64_t in, int64_t out, bool has_bias) {
  return Exact(in) * out + (has_bias ? out : 0);
}

Exact norm_params(NormKind norm, int64_t width) {
  return norm == NormKind::kLayerNorm ? Exact(2) * width : Exact(width);
}

void require(bool ok, const char* field, const std::string& message) {
  if (!ok) throw SpecError(field, message);
}

std::string num(int64_t v) { return std::to_string(v); }

void require_unset(const AttentionSpec& s, std::initializer_list<std::string_view> own) {
  const struct {
    const char* key;
    bool set;
  } fields[] = {
      {"dc", s.latent_dim != 0},
      {"dr", s.rope_dim != 0},
      {"dn", s.nope_dim != 0},
      {"dv", s.value_dim != 0},
      {"dq", s.q_latent_dim != 0},
      {"m", s.bias_channels != 0},
      {"init", s.m_init != GvaInit::kBaseline},
      {"qnorm", s.q_norm},
      {"knorm", s.k_norm},
      {"qknorm", s.qk_norm},
      {"plainlatent", s.plain_latent},
  };
  for (const auto& field : fields) {
    bool owned = false;
    for (std::string_view key : own) owned = owned || key == field.key;
    if (owned || !field.set) continue;
    std::string message = "option '";
    message += field.key;
    message += "' does not apply to ";
    message += attn_variant_id(s.variant);
    throw SpecError(field.key, message);
  }
}

Exact grouped_value_projection_macs(const AttentionSpec& s) {
  const int64_t D = s.d_model, H = s.n_heads;
  return Exact(D) * (H * (s.nope_dim + s.rope_dim)) + Exact(D) * (s.n_groups * s.head_dim) +
         Exact(D) * s.rope_dim + Exact(H * s.head_dim) * D;
}

void require_model_positions(const AttentionSpec& s) {
  require(s.pos == PosScheme::kLearned || s.pos == PosScheme::kSinusoidal ||
              s.pos == PosScheme::kRope || s.pos == PosScheme::kNone,
          "pos",
          std::string(attn_variant_id(s.variant)) +
              " takes the model's positions: learned, sinusoidal, rope or none");
}

}  // namespace family_detail
}  // namespace kvlab
