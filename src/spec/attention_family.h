#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "spec/attention_spec.h"

namespace kvlab {

// What the spec layer knows of one attention family (AttnFamily): its options, defaults,
// rules, cache layout, parameters and multiply-adds. AttentionSpec's methods forward here, so
// a family's arithmetic is one file (spec/<family>_family.cpp) and a new family is one more
// implementation, found through spec_family(), the table attention_families.def generates.
class AttentionFamily {
 public:
  virtual ~AttentionFamily() = default;

  // The family's name in messages and records ("standard", "gva", ...).
  virtual std::string_view name() const = 0;
  // Whether its modules can rotate by RoPE (linear attention keeps no RoPE inside its state: a
  // model of it takes learned or no positions).
  virtual bool takes_rope() const { return true; }

  // Option keys the text form accepts after the positional group count ("dr", "qnorm", ...).
  virtual std::vector<std::string_view> options(const AttentionSpec& spec) const = 0;
  // Widths and positions before the options are read (the model's fields are already set).
  virtual void set_defaults(AttentionSpec& spec) const = 0;
  // After the options: what follows from them (gva's positions from dr).
  virtual void finish_parse(AttentionSpec& spec) const;
  // The canonical text's items after the variant id, omitting defaults.
  virtual std::vector<std::string> option_text(const AttentionSpec& spec) const = 0;
  // The family's own rules; AttentionSpec::validate checks the model's fields and the group
  // count first. Throws SpecError naming the field.
  virtual void validate(const AttentionSpec& spec) const = 0;

  virtual bool shares_kv(const AttentionSpec& spec) const = 0;
  virtual int64_t qk_dim(const AttentionSpec& spec) const = 0;
  virtual int64_t value_head_dim(const AttentionSpec& spec) const = 0;  // per query head

  virtual CacheLayout cache_layout(const AttentionSpec& spec) const = 0;
  virtual Exact param_count(const AttentionSpec& spec) const = 0;
  virtual AttnMacs prefill_macs(const AttentionSpec& spec, int64_t n_tokens) const = 0;
  virtual AttnMacs decode_macs(const AttentionSpec& spec, int64_t context) const = 0;
};

// The family object of each AttnFamily (a switch generated from attention_families.def).
const AttentionFamily& spec_family(AttnFamily family);

// The families (spec/<family>_family.cpp).
#define KVLAB_ATTENTION_FAMILY(Name, id) const AttentionFamily& id##_family();
#include "spec/attention_families.def"

// The standard family's projections: whether one projection is query and key (Q=K: qk-v, qkv1
// and their '+' forms); AttentionSpec::shares_kv says whether one is key and value.
bool standard_queries_are_keys(const AttentionSpec& spec);

// Shared by the families' files.
namespace family_detail {
Exact linear_params(int64_t in, int64_t out, bool has_bias);
Exact norm_params(NormKind norm, int64_t width);
void require(bool ok, const char* field, const std::string& message);
std::string num(int64_t v);
// Rejects the fields of other families (latent widths, decoupled RoPE, gva's q-norm and M_h
// init, the '+' channels, knorm) that `own` does not list.
void require_unset(const AttentionSpec& spec, std::initializer_list<std::string_view> own);
// gva and gta, per token in both forms: the query (content and rope slices), the G value heads
// (the tied state), the shared rope key and the output projection.
Exact grouped_value_projection_macs(const AttentionSpec& spec);
// Learned, sinusoidal, rope or none: the model's positions, as the standard layouts take them.
void require_model_positions(const AttentionSpec& spec);
}  // namespace family_detail

}  // namespace kvlab
