#include "spec/attention_spec.h"

#include <charconv>
#include <set>
#include <string>
#include <vector>

#include "spec/spec_error.h"

namespace kvlab {
namespace {

constexpr int64_t kDefaultGvaRopeDim = 16;    // the GVA paper's proposed d_r
constexpr int64_t kDefaultBiasChannels = 10;  // m of the '+' variants: seed 003 §4.1 uses 10

struct VariantInfo {
  AttnVariant variant;
  std::string_view id;
  bool takes_groups;  // "gqa:G": a positional group count
};

constexpr VariantInfo kVariants[] = {
    {AttnVariant::kMha, "mha", false},       {AttnVariant::kGqa, "gqa", true},
    {AttnVariant::kMqa, "mqa", false},       {AttnVariant::kQkV, "qk-v", false},
    {AttnVariant::kQKv, "q-kv", false},      {AttnVariant::kQkv1, "qkv1", false},
    {AttnVariant::kQGqa, "q-gqa", true},     {AttnVariant::kQMqa, "q-mqa", false},
    {AttnVariant::kQkVPlus, "qk-v+", false}, {AttnVariant::kQkv1Plus, "qkv1+", false},
    {AttnVariant::kMla, "mla", false},       {AttnVariant::kGva, "gva", true},
    {AttnVariant::kLinear, "linear", false},
};

const char* kKnownVariants =
    "mha, gqa:G, mqa, qk-v, q-kv, qkv1, q-gqa:G, q-mqa, qk-v+, qkv1+, mla, gva:G, linear";

bool is_plus(AttnVariant v) { return v == AttnVariant::kQkVPlus || v == AttnVariant::kQkv1Plus; }

// Options each variant accepts, beside its positional group count.
std::vector<std::string_view> allowed_options(AttnVariant v) {
  switch (v) {
    case AttnVariant::kMla:
      return {"dc", "dr", "dn", "dv", "dq"};
    case AttnVariant::kGva:
      return {"dr", "dn", "init", "qnorm"};
    case AttnVariant::kQkVPlus:
    case AttnVariant::kQkv1Plus:
      return {"m"};
    case AttnVariant::kQKv:
    case AttnVariant::kQkv1:
    case AttnVariant::kQGqa:
    case AttnVariant::kQMqa:
      return {"knorm"};
    default:
      return {};
  }
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

void require(bool ok, const char* field, const std::string& message) {
  if (!ok) throw SpecError(field, message);
}

std::string num(int64_t v) { return std::to_string(v); }

}  // namespace

std::string_view attn_variant_id(AttnVariant variant) {
  for (const VariantInfo& info : kVariants) {
    if (info.variant == variant) return info.id;
  }
  return "?";
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
  const std::string_view name = trim(text.substr(0, name_end));
  const VariantInfo* info = nullptr;
  for (const VariantInfo& candidate : kVariants) {
    if (candidate.id == name) info = &candidate;
  }
  if (info == nullptr) {
    throw SpecError("attn", "unknown attention variant '" + std::string(name) +
                                "' (known: " + kKnownVariants + ")");
  }

  AttentionSpec spec;
  spec.variant = info->variant;
  spec.d_model = model.d_model;
  spec.n_heads = model.n_heads;
  spec.head_dim = model.head_dim;
  spec.causal = model.causal();
  spec.bias = model.bias;
  spec.norm = model.norm;
  spec.rope_theta = model.rope_theta;
  spec.cache_dtype = cache_dtype;
  spec.pos = model.pos;
  switch (spec.variant) {
    case AttnVariant::kMqa:
    case AttnVariant::kQMqa:
    case AttnVariant::kMla:
      spec.n_groups = 1;
      break;
    case AttnVariant::kGqa:
    case AttnVariant::kQGqa:
    case AttnVariant::kGva:
      spec.n_groups = 0;
      break;  // required in the text
    default:
      spec.n_groups = model.n_heads;
      break;
  }
  if (spec.variant == AttnVariant::kMla) {
    spec.latent_dim = 4 * model.head_dim;
    spec.rope_dim = model.head_dim / 2;
    spec.nope_dim = model.head_dim;
    spec.value_dim = model.head_dim;
    spec.pos = PosScheme::kDrope;
  }
  if (spec.variant == AttnVariant::kGva) {
    spec.rope_dim = kDefaultGvaRopeDim;
    spec.nope_dim = model.head_dim;
  }
  if (is_plus(spec.variant)) {
    spec.bias_channels = kDefaultBiasChannels;
    spec.pos = PosScheme::kBias2d;
  }

  const std::vector<std::string_view> allowed = allowed_options(spec.variant);
  std::set<std::string, std::less<>> seen;
  bool groups_given = false;
  if (name_end != std::string_view::npos) {
    const std::vector<std::string_view> items = split(text.substr(name_end + 1), ',');
    for (size_t i = 0; i < items.size(); ++i) {
      const std::string_view item = items[i];
      if (item.empty()) throw SpecError("attn", "empty option in '" + std::string(text) + "'");
      const size_t eq = item.find('=');
      const std::string_view key = trim(item.substr(0, eq));
      const std::string_view value =
          eq == item.npos ? std::string_view() : trim(item.substr(eq + 1));
      if (i == 0 && info->takes_groups && eq == item.npos) {
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
      const bool is_flag = key == "qnorm" || key == "knorm";
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
    }
  }
  if (info->takes_groups && !groups_given) {
    throw SpecError("groups", std::string(info->id) +
                                  " needs a group count: " + std::string(info->id) + ":G (e.g. " +
                                  std::string(info->id) + ":8)");
  }
  if (spec.variant == AttnVariant::kGva) {
    // Without the decoupled slice GVA rotates its reconstructed key over the full width.
    spec.pos = spec.rope_dim > 0 ? PosScheme::kDrope : PosScheme::kRope;
  }
  spec.validate();
  return spec;
}

std::string AttentionSpec::to_string() const {
  std::string out(attn_variant_id(variant));
  std::vector<std::string> items;
  switch (variant) {
    case AttnVariant::kGqa:
    case AttnVariant::kQGqa:
      items.push_back(num(n_groups));
      break;
    case AttnVariant::kGva:
      items.push_back(num(n_groups));
      items.push_back("dr=" + num(rope_dim));
      if (nope_dim != head_dim) items.push_back("dn=" + num(nope_dim));
      if (m_init != GvaInit::kBaseline)
        items.push_back("init=" + std::string(gva_init_name(m_init)));
      if (q_norm) items.push_back("qnorm");
      break;
    case AttnVariant::kMla:
      items.push_back("dc=" + num(latent_dim));
      items.push_back("dr=" + num(rope_dim));
      if (nope_dim != head_dim) items.push_back("dn=" + num(nope_dim));
      if (value_dim != head_dim) items.push_back("dv=" + num(value_dim));
      if (q_latent_dim != 0) items.push_back("dq=" + num(q_latent_dim));
      break;
    case AttnVariant::kQkVPlus:
    case AttnVariant::kQkv1Plus:
      if (bias_channels != kDefaultBiasChannels) items.push_back("m=" + num(bias_channels));
      break;
    default:
      break;
  }
  if (k_norm) items.push_back("knorm");
  for (size_t i = 0; i < items.size(); ++i) out += (i == 0 ? ":" : ",") + items[i];
  return out;
}

bool AttentionSpec::shares_kv() const {
  switch (variant) {
    case AttnVariant::kQKv:
    case AttnVariant::kQkv1:
    case AttnVariant::kQGqa:
    case AttnVariant::kQMqa:
    case AttnVariant::kQkv1Plus:
    case AttnVariant::kLinear:
      return true;
    default:
      return false;
  }
}

int64_t AttentionSpec::qk_dim() const {
  switch (variant) {
    case AttnVariant::kMla:
    case AttnVariant::kGva:
      return nope_dim + rope_dim;
    default:
      return head_dim;
  }
}

int64_t AttentionSpec::attn_out_dim() const {
  return n_heads * (variant == AttnVariant::kMla ? value_dim : head_dim);
}

void AttentionSpec::validate() const {
  const std::string id(attn_variant_id(variant));
  require(d_model > 0, "d_model", "must be > 0, got " + num(d_model));
  require(n_heads > 0, "heads", "must be > 0, got " + num(n_heads));
  require(head_dim > 0, "head_dim", "must be > 0, got " + num(head_dim));
  require(n_groups >= 1 && n_groups <= n_heads && n_heads % n_groups == 0, "groups",
          num(n_heads) + " query heads cannot be split into " + num(n_groups) +
              " groups (groups must divide the number of heads)");
  switch (variant) {
    case AttnVariant::kMqa:
    case AttnVariant::kQMqa:
    case AttnVariant::kMla:
      require(n_groups == 1, "groups", id + " has exactly one group, got " + num(n_groups));
      break;
    case AttnVariant::kGqa:
    case AttnVariant::kQGqa:
    case AttnVariant::kGva:
      break;
    default:
      require(n_groups == n_heads, "groups",
              id + " has one group per head (" + num(n_heads) + "), got " + num(n_groups));
  }
  if (is_plus(variant)) {
    require(!causal, "attn",
            id + " adds a 2-D positional bias for non-causal models only (seed 003 §3.1); "
                 "a decoder is causal: use an encoder, vit or set model");
    require(bias_channels > 0 && bias_channels % 2 == 0, "m",
            "channels of the 2-D positional tensor must be positive and even (half encode the "
            "row, half the column), got " +
                num(bias_channels));
    require(pos == PosScheme::kBias2d, "pos", id + " uses the 2-D positional bias");
  }
  if (variant == AttnVariant::kMla) {
    require(latent_dim > 0, "dc", "latent width must be > 0");
    require(nope_dim > 0, "dn", "content width must be > 0");
    require(value_dim > 0, "dv", "value width must be > 0");
    require(rope_dim > 0, "dr", "mla needs its decoupled RoPE key: dr must be > 0");
    require(q_latent_dim >= 0, "dq", "must be >= 0 (0 = full-rank query)");
    require(pos == PosScheme::kDrope, "pos", "mla uses decoupled RoPE");
  }
  if (variant == AttnVariant::kGva) {
    require(nope_dim > 0, "dn", "content width must be > 0");
    require(rope_dim >= 0, "dr", "must be >= 0");
    require(pos == (rope_dim > 0 ? PosScheme::kDrope : PosScheme::kRope), "pos",
            "gva uses decoupled RoPE when dr > 0 and full-width RoPE when dr = 0");
  } else {
    require(!q_norm, "qnorm", "q-norm applies to gva only");
    require(m_init == GvaInit::kBaseline, "init", "M_h init applies to gva only");
  }
  if (variant != AttnVariant::kMla && variant != AttnVariant::kGva) {
    require(rope_dim == 0 && latent_dim == 0 && q_latent_dim == 0, "attn",
            id + " has no latent or decoupled-RoPE widths");
    require(pos == PosScheme::kLearned || pos == PosScheme::kSinusoidal ||
                pos == PosScheme::kRope || pos == PosScheme::kNone ||
                (is_plus(variant) && pos == PosScheme::kBias2d),
            "pos", id + " takes the model's positions: learned, sinusoidal, rope or none");
  }
  if (variant == AttnVariant::kLinear) {
    require(pos != PosScheme::kRope, "pos",
            "linear attention takes learned or no positions: RoPE inside its running state is "
            "not implemented");
  }
  if (pos == PosScheme::kDrope) {
    require(rope_dim % 2 == 0, "dr",
            "RoPE rotates pairs of channels, so dr must be even, got " + num(rope_dim));
  }
  if (pos == PosScheme::kRope) {
    const int64_t rotated = variant == AttnVariant::kGva ? nope_dim : head_dim;
    require(
        rotated % 2 == 0, variant == AttnVariant::kGva ? "dn" : "head_dim",
        "RoPE rotates pairs of channels, so the rotated width must be even, got " + num(rotated));
  }
  if (pos == PosScheme::kRope || pos == PosScheme::kDrope) {
    require(rope_theta > 0, "rope_theta", "must be > 0");
  }
  if (k_norm) {
    require(shares_kv() && pos == PosScheme::kRope && !is_plus(variant), "knorm",
            "K = RoPE(RMSNorm(C)) applies to the shared K=V layout with RoPE positions "
            "(q-kv, qkv1, q-gqa, q-mqa on a rope model); this model's positions are " +
                std::string(pos_scheme_name(pos)));
  }
}

}  // namespace kvlab
