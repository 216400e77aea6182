#include "spec/attention_spec.h"

#include <charconv>
#include <cmath>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "spec/attention_family.h"
#include "spec/spec_error.h"

namespace kvlab {
namespace {

// The group count's rule: one per query head, exactly one, given in the text ("gqa:8"), or
// given as an option ("gla:hc=2").
enum class GroupRule { kPerHead, kOne, kGiven, kOption };

struct VariantInfo {
  AttnVariant variant;
  std::string_view id;
  AttnFamily family;
  GroupRule groups;
};

constexpr VariantInfo kVariants[] = {
#define KVLAB_ATTENTION_VARIANT(Name, id, Family, groups) \
  {AttnVariant::k##Name, id, AttnFamily::k##Family, GroupRule::k##groups},
#include "spec/attention_families.def"
};

const VariantInfo& info_of(AttnVariant variant) {
  for (const VariantInfo& info : kVariants) {
    if (info.variant == variant) return info;
  }
  throw std::logic_error("attention variant without a row in kVariants");
}

std::string known_variants() {
  std::string out;
  for (const VariantInfo& info : kVariants) {
    out += (out.empty() ? "" : ", ") + std::string(info.id) +
           (info.groups == GroupRule::kGiven    ? ":G"
            : info.groups == GroupRule::kOption ? ":hc=C"
                                                : "");
  }
  return out;
}

std::string join(const std::vector<std::string_view>& items) {
  std::string out;
  for (std::string_view item : items) {
    if (!out.empty()) out += ", ";
    out += item;
  }
  return out.empty() ? "none" : out;
}

int64_t parse_count(std::string_view field, std::string_view text) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || value < 0) {
    throw SpecError(std::string(field),
                    "'" + std::string(text) + "' is not a non-negative integer");
  }
  return value;
}

GvaInit parse_gva_init(std::string_view text) {
  for (GvaInit init : {GvaInit::kBaseline, GvaInit::kScaleMatched, GvaInit::kVarianceFixed}) {
    if (text == gva_init_name(init)) return init;
  }
  throw SpecError("init", "unknown M_h init '" + std::string(text) +
                              "' (known: baseline, scale-matched, variance-fixed)");
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    size_t at = s.find(sep, start);
    parts.push_back(trim(s.substr(start, at == std::string_view::npos ? s.npos : at - start)));
    if (at == std::string_view::npos) break;
    start = at + 1;
  }
  return parts;
}

// The variant id a spec text starts with (before any ':' or ','), trimmed.
std::string_view variant_id(std::string_view text) {
  text = trim(text);
  return trim(text.substr(0, text.find_first_of(":,")));
}

// kVariants' row of an id, or nullptr.
const VariantInfo* variant_named(std::string_view id) {
  for (const VariantInfo& info : kVariants) {
    if (info.id == id) return &info;
  }
  return nullptr;
}

using family_detail::num;
using family_detail::require;

}  // namespace

std::string_view attn_variant_id(AttnVariant variant) { return info_of(variant).id; }

std::string_view attn_family_name(AttnFamily family) { return spec_family(family).name(); }

std::optional<AttnFamily> attn_family_of(std::string_view text) {
  const VariantInfo* info = variant_named(variant_id(text));
  return info != nullptr ? std::optional<AttnFamily>(info->family) : std::nullopt;
}

std::string_view gva_init_name(GvaInit init) {
  switch (init) {
    case GvaInit::kBaseline:
      return "baseline";
    case GvaInit::kScaleMatched:
      return "scale-matched";
    case GvaInit::kVarianceFixed:
      return "variance-fixed";
  }
  return "?";
}

AttentionSpec AttentionSpec::parse(std::string_view text, const ModelShape& model,
                                   DType cache_dtype) {
  model.validate();
  text = trim(text);
  const size_t name_end = text.find_first_of(":,");
  const std::string_view name = variant_id(text);
  const VariantInfo* info = variant_named(name);
  if (info == nullptr) {
    throw SpecError("attn", "unknown attention variant '" + std::string(name) +
                                "' (known: " + known_variants() + ")");
  }

  AttentionSpec spec;
  spec.variant = info->variant;
  spec.d_model = model.d_model;
  spec.n_heads = model.n_heads;
  spec.head_dim = model.head_dim;
  spec.causal = model.causal();
  spec.bias = model.bias;
  spec.norm = model.norm;
  spec.norm_eps = model.norm_eps;
  spec.rope_theta = model.rope_theta;
  spec.rope_scaling = model.rope_scaling;
  spec.cache_dtype = cache_dtype;
  spec.pos = model.pos;
  spec.n_groups = info->groups == GroupRule::kOne       ? 1
                  : info->groups == GroupRule::kPerHead ? model.n_heads
                                                        : 0;  // required in the text
  const AttentionFamily& family = spec_family(info->family);
  family.set_defaults(spec);

  const std::vector<std::string_view> allowed = family.options(spec);
  std::set<std::string, std::less<>> seen;
  bool groups_given = false;
  const bool takes_groups = info->groups == GroupRule::kGiven;
  if (name_end != std::string_view::npos) {
    const std::vector<std::string_view> items = split(text.substr(name_end + 1), ',');
    for (size_t i = 0; i < items.size(); ++i) {
      const std::string_view item = items[i];
      if (item.empty()) throw SpecError("attn", "empty option in '" + std::string(text) + "'");
      const size_t eq = item.find('=');
      const std::string_view key = trim(item.substr(0, eq));
      const std::string_view value =
          eq == item.npos ? std::string_view() : trim(item.substr(eq + 1));
      if (i == 0 && takes_groups && eq == item.npos) {
        spec.n_groups = parse_count("groups", key);
        groups_given = true;
        continue;
      }
      bool known = false;
      for (std::string_view a : allowed) known = known || a == key;
      if (!known) {
        throw SpecError(std::string(key), "option '" + std::string(key) + "' does not apply to " +
                                              std::string(info->id) +
                                              " (its options: " + join(allowed) + ")");
      }
      if (!seen.insert(std::string(key)).second) {
        throw SpecError(std::string(key), "option '" + std::string(key) + "' given twice");
      }
      const bool is_flag =
          key == "qnorm" || key == "knorm" || key == "qknorm" || key == "plainlatent";
      if (is_flag != (eq == item.npos)) {
        throw SpecError(
            std::string(key),
            is_flag ? "'" + std::string(key) + "' is a flag and takes no value"
                    : "'" + std::string(key) + "' needs a value (" + std::string(key) + "=...)");
      }
      if (key == "dc") spec.latent_dim = parse_count(key, value);
      if (key == "dr") spec.rope_dim = parse_count(key, value);
      if (key == "dn") spec.nope_dim = parse_count(key, value);
      if (key == "dv") spec.value_dim = parse_count(key, value);
      if (key == "dq") spec.q_latent_dim = parse_count(key, value);
      if (key == "m") spec.bias_channels = parse_count(key, value);
      if (key == "init") spec.m_init = parse_gva_init(value);
      if (key == "qnorm") spec.q_norm = true;
      if (key == "knorm") spec.k_norm = true;
      if (key == "qknorm") spec.qk_norm = true;
      if (key == "plainlatent") spec.plain_latent = true;
      if (key == "hc") spec.n_groups = parse_count(key, value);
    }
  }
  if (info->groups == GroupRule::kOption && seen.count("hc") == 0) {
    throw SpecError("hc", std::string(info->id) +
                              " needs its number of latent heads: " + std::string(info->id) +
                              ":hc=C (e.g. " + std::string(info->id) + ":hc=2)");
  }
  if (takes_groups && !groups_given) {
    throw SpecError("groups", std::string(info->id) +
                                  " needs a group count: " + std::string(info->id) + ":G (e.g. " +
                                  std::string(info->id) + ":8)");
  }
  family.finish_parse(spec);
  spec.validate();
  return spec;
}

AttnFamily AttentionSpec::family() const { return info_of(variant).family; }

std::string AttentionSpec::to_string() const {
  std::string out(attn_variant_id(variant));
  std::vector<std::string> items;
  if (info_of(variant).groups == GroupRule::kGiven) items.push_back(num(n_groups));
  for (std::string& item : spec_family(family()).option_text(*this)) {
    items.push_back(std::move(item));
  }
  for (size_t i = 0; i < items.size(); ++i) out += (i == 0 ? ":" : ",") + items[i];
  return out;
}

bool AttentionSpec::shares_kv() const { return spec_family(family()).shares_kv(*this); }

double AttentionSpec::softmax_scale() const {
  return rope_scaling.score_factor() / std::sqrt(static_cast<double>(qk_dim()));
}

int64_t AttentionSpec::qk_dim() const { return spec_family(family()).qk_dim(*this); }

int64_t AttentionSpec::attn_out_dim() const {
  return n_heads * spec_family(family()).value_head_dim(*this);
}

CacheLayout AttentionSpec::cache_layout() const {
  CacheLayout layout = spec_family(family()).cache_layout(*this);
  if (rope_cache_dtype.has_value()) {
    layout.rope_dtype = rope_cache_dtype;
  } else if (!is_element_dtype(cache_dtype)) {
    layout.rope_dtype = DType::kBf16;
  }
  layout.key_order = key_cache_order;
  return layout;
}

Exact AttentionSpec::param_count() const { return spec_family(family()).param_count(*this); }

AttnMacs AttentionSpec::prefill_macs(int64_t n_tokens) const {
  return spec_family(family()).prefill_macs(*this, n_tokens);
}

AttnMacs AttentionSpec::decode_macs(int64_t context) const {
  return spec_family(family()).decode_macs(*this, context);
}

void AttentionSpec::validate() const {
  const VariantInfo& info = info_of(variant);
  const std::string id(info.id);
  require(d_model > 0, "d_model", "must be > 0, got " + num(d_model));
  require(n_heads > 0, "heads", "must be > 0, got " + num(n_heads));
  require(head_dim > 0, "head_dim", "must be > 0, got " + num(head_dim));
  // the spec's own widths under the model's bounds: every product of them (parameters, cache
  // bytes, a module's tensors) then fits in 63 bits
  require_at_most("d_model", d_model, kMaxWidth);
  require_at_most("heads", n_heads, kMaxCount);
  require_at_most("head_dim", head_dim, kMaxWidth);
  require_at_most("dc", latent_dim, kMaxWidth);
  require_at_most("dr", rope_dim, kMaxWidth);
  require_at_most("dn", nope_dim, kMaxWidth);
  require_at_most("dv", value_dim, kMaxWidth);
  require_at_most("dq", q_latent_dim, kMaxWidth);
  require_at_most("m", bias_channels, kMaxWidth);
  require(n_groups >= 1 && n_groups <= n_heads && n_heads % n_groups == 0,
          info.groups == GroupRule::kOption ? "hc" : "groups",
          num(n_heads) + " query heads cannot be split into " + num(n_groups) +
              " groups (groups must divide the number of heads)");
  switch (info.groups) {
    case GroupRule::kOne:
      require(n_groups == 1, "groups", id + " has exactly one group, got " + num(n_groups));
      break;
    case GroupRule::kPerHead:
      require(n_groups == n_heads, "groups",
              id + " has one group per head (" + num(n_heads) + "), got " + num(n_groups));
      break;
    case GroupRule::kGiven:
    case GroupRule::kOption:
      break;
  }
  spec_family(info.family).validate(*this);
  if (key_cache_order == KeyOrder::kTokenPairs) {
    const std::string problem = cache_layout().key_pairs_problem();
    require(problem.empty(), "key_order", id + ": " + problem);
  }
}

}  // namespace kvlab
