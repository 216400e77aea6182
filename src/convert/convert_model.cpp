#include "convert/convert_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "convert/layer_targets.h"
#include "kernels/rope.h"
#include "nn/checkpoint.h"
#include "spec/spec_error.h"

namespace kvlab::convert {
namespace {

nn::TransformerBlockImpl& block(nn::TransformerModelImpl& model, size_t layer) {
  return *(*model.model->layers)[layer]->as<nn::TransformerBlockImpl>();
}

// Each layer's attention input on the calibration tokens: the moments of the fit windows and
// the held-out windows themselves. One forward of the source, a batch of windows at a time.
struct LayerInputs {
  std::vector<LayerMoments> moments;
  std::vector<torch::Tensor> held_out;  // [B, T, D] per layer
};

LayerInputs collect_layer_inputs(nn::TransformerModelImpl& model, const Calibration& calibration) {
  torch::NoGradGuard no_grad;
  const size_t n_layers = model.model->layers->size();
  LayerInputs out;
  out.moments.resize(n_layers);
  out.held_out.resize(n_layers);
  const auto run = [&](const torch::Tensor& windows, bool fit) {
    constexpr int64_t kBatch = 8;
    for (int64_t start = 0; start < windows.size(0); start += kBatch) {
      torch::Tensor h =
          model.model->embed(windows.narrow(0, start, std::min(kBatch, windows.size(0) - start)));
      for (size_t l = 0; l < n_layers; ++l) {
        nn::TransformerBlockImpl& b = block(model, l);
        const torch::Tensor x = b.input_layernorm->forward(h);
        if (fit) {
          out.moments[l].add(x);
        } else {
          out.held_out[l] =
              out.held_out[l].defined() ? torch::cat({out.held_out[l], x}, 0) : x.clone();
        }
        h = b.forward(h);
      }
    }
  };
  run(calibration.fit, true);
  run(calibration.held_out, false);
  return out;
}

void require_source(const ModelConfig& config) {
  const AttentionSpec& a = config.attn;
  if (config.shape.kind != ModelKind::kDecoder) {
    throw SpecError("checkpoint", "the source is not a decoder (kvlab converts language models)");
  }
  if (a.variant != AttnVariant::kMha && a.variant != AttnVariant::kGqa &&
      a.variant != AttnVariant::kMqa) {
    throw SpecError("checkpoint", "the source's attention is '" + a.to_string() +
                                      "'; kvlab converts from mha, gqa or mqa");
  }
  if (a.qk_norm) {
    throw SpecError("checkpoint",
                    "the source normalises q and k per head (qknorm, as Qwen3): a norm is not "
                    "linear, so no converted projection reproduces it; not supported yet");
  }
}

bool is_grouped(AttnVariant v) {
  return v == AttnVariant::kMha || v == AttnVariant::kGqa || v == AttnVariant::kMqa;
}
bool is_shared_kv(AttnVariant v) {
  return v == AttnVariant::kQKv || v == AttnVariant::kQGqa || v == AttnVariant::kQMqa;
}

// What convert does for a target family: the checks of what it can make from a source (true
// when the target needs a rotary selection) and the layer's conversion. One object per family,
// found through target_family(), convert's one table of families.
class TargetFamily {
 public:
  virtual ~TargetFamily() = default;
  // Throws SpecError("attn") naming what the target cannot be made from; `name` is the
  // target's text in quotes.
  virtual bool check(const AttentionSpec& t, const ModelConfig& source,
                     const std::string& name) const = 0;
  virtual std::vector<LayerCandidate> convert(const SourceAttention& source,
                                              const torch::Tensor& moment,
                                              const AttentionSpec& target,
                                              const RotarySelection& rotary) const = 0;
  // Whether the target's key/value groups merge the source's (mla's latent is one row).
  virtual bool merges_groups() const { return true; }
};

void require_rope_source(const ModelConfig& source, const std::string& name) {
  if (source.shape.pos != PosScheme::kRope) {
    throw SpecError("attn", name + " rotates keys with RoPE; the source has " +
                                std::string(pos_scheme_name(source.shape.pos)) +
                                " positions, so there is no rotation to keep");
  }
}

// mha, gqa, mqa (grouped) and q-kv, q-gqa, q-mqa (shared K=V)
class StandardTarget final : public TargetFamily {
 public:
  bool check(const AttentionSpec& t, const ModelConfig&, const std::string& name) const override {
    if (!is_grouped(t.variant) && !is_shared_kv(t.variant)) {
      throw SpecError("attn", name +
                                  ": kvlab converts to mha, gqa, mqa, q-kv, q-gqa, q-mqa, gva "
                                  "and gta (Q=K variants share the query, which a trained "
                                  "model's keys do not)");
    }
    if (t.k_norm || t.qk_norm) {
      throw SpecError("attn", name + ": the converted layer cannot add a norm (not linear)");
    }
    return false;
  }
  std::vector<LayerCandidate> convert(const SourceAttention& source, const torch::Tensor& moment,
                                      const AttentionSpec& target,
                                      const RotarySelection&) const override {
    return is_shared_kv(target.variant) ? convert_to_shared_kv(source, moment, target)
                                        : convert_to_grouped(source, moment, target);
  }
};

// gva and gta (gta: M_h a channel selection)
class GroupedValueTarget final : public TargetFamily {
 public:
  explicit GroupedValueTarget(bool tied) : tied_(tied) {}
  bool check(const AttentionSpec& t, const ModelConfig& source,
             const std::string& name) const override {
    require_rope_source(source, name);
    if (tied_) return true;
    if (t.q_norm) throw SpecError("attn", name + ": qnorm is not linear; convert without it");
    const AttentionSpec& s = source.attn;
    if (t.nope_dim + t.rope_dim != s.head_dim) {
      throw SpecError("attn", name + ": dn + dr must be the source's head width " +
                                  std::to_string(s.head_dim) +
                                  " (dn=" + std::to_string(t.nope_dim) +
                                  ", dr=" + std::to_string(t.rope_dim) + ")");
    }
    return t.rope_dim > 0;
  }
  std::vector<LayerCandidate> convert(const SourceAttention& source, const torch::Tensor& moment,
                                      const AttentionSpec& target,
                                      const RotarySelection& rotary) const override {
    return convert_to_grouped_value(source, moment, target, rotary);
  }

 private:
  bool tied_;
};

class LatentTarget final : public TargetFamily {
 public:
  bool check(const AttentionSpec& t, const ModelConfig& source,
             const std::string& name) const override {
    require_rope_source(source, name);
    if (!t.plain_latent) {
      throw SpecError("attn", name +
                                  ": a converted mla caches its latent without DeepSeek's "
                                  "kv_a_layernorm (not linear): add plainlatent");
    }
    if (t.q_latent_dim != 0) {
      throw SpecError("attn", name + ": conversion keeps the full-rank query; drop dq");
    }
    const AttentionSpec& s = source.attn;
    if (t.nope_dim + t.rope_dim != s.head_dim || t.value_dim != s.head_dim) {
      throw SpecError("attn", fmt::format("{}: dn + dr and dv must be the source's head width "
                                          "{} (dn={}, dr={}, dv={})",
                                          name, s.head_dim, t.nope_dim, t.rope_dim, t.value_dim));
    }
    return true;
  }
  std::vector<LayerCandidate> convert(const SourceAttention& source, const torch::Tensor& moment,
                                      const AttentionSpec& target,
                                      const RotarySelection& rotary) const override {
    return convert_to_latent(source, moment, target, rotary);
  }
  bool merges_groups() const override { return false; }
};

// A family kvlab does not convert to, and why.
class RefusedTarget final : public TargetFamily {
 public:
  explicit RefusedTarget(const char* why) : why_(why) {}
  bool check(const AttentionSpec&, const ModelConfig&, const std::string& name) const override {
    throw SpecError("attn", name + ": " + why_);
  }
  std::vector<LayerCandidate> convert(const SourceAttention&, const torch::Tensor&,
                                      const AttentionSpec& target,
                                      const RotarySelection&) const override {
    throw SpecError("attn", "no conversion to '" + target.to_string() + "'");
  }

 private:
  const char* why_;
};

// Each family's entry (attention_families.def names them <id>_target).
const TargetFamily& standard_target() {
  static const StandardTarget target;
  return target;
}
const TargetFamily& gva_target() {
  static const GroupedValueTarget target(/*tied=*/false);
  return target;
}
const TargetFamily& gta_target() {
  static const GroupedValueTarget target(/*tied=*/true);
  return target;
}
const TargetFamily& mla_target() {
  static const LatentTarget target;
  return target;
}
const TargetFamily& gla_target() {
  static const RefusedTarget target("conversion to gla is not implemented");
  return target;
}
const TargetFamily& linear_target() {
  static const RefusedTarget target("linear attention keeps no keys to convert to");
  return target;
}

const TargetFamily& target_family(AttnFamily family) {
  switch (family) {
#define KVLAB_ATTENTION_FAMILY(Name, id) \
  case AttnFamily::k##Name:              \
    return id##_target();
#include "spec/attention_families.def"
  }
  throw std::logic_error("attention family without a conversion entry");
}

// Checks what a target can be made from this source; true when it needs a rotary selection.
bool check_target(const AttentionSpec& t, const ModelConfig& source) {
  const std::string name = fmt::format("'{}'", t.to_string());
  const TargetFamily& family = target_family(t.family());
  const bool rotary = family.check(t, source, name);
  if (family.merges_groups() && source.attn.n_groups % t.n_groups != 0) {
    throw SpecError("attn", name + " has " + std::to_string(t.n_groups) +
                                " key/value groups, which do not divide the source's " +
                                std::to_string(source.attn.n_groups) +
                                " (groups are merged, never split)");
  }
  return rotary;
}

std::vector<LayerCandidate> convert_layer(const SourceAttention& source,
                                          const torch::Tensor& moment, const AttentionSpec& target,
                                          const RotarySelection& rotary) {
  return target_family(target.family()).convert(source, moment, target, rotary);
}

std::map<std::string, torch::Tensor> parameter_map(const torch::nn::Module& module) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : module.named_parameters()) out.emplace(item.key(), item.value());
  return out;
}

void load(torch::nn::Module& module, const std::map<std::string, torch::Tensor>& parameters,
          const std::string& what) {
  torch::NoGradGuard no_grad;
  nn::copy_by_name(parameters, parameter_map(module), what);
}

struct Outputs {
  torch::Tensor y, map;
};

Outputs run_layer(nn::AttentionImpl& layer, const torch::Tensor& x) {
  torch::NoGradGuard no_grad;
  layer.use_fused_attention(false);
  layer.keep_attention_maps(true);
  Outputs out;
  out.y = layer.forward(x);
  out.map = layer.last_attention_map().reshape({x.size(0), layer.spec().n_heads, x.size(1), -1});
  return out;
}

double relative_error(const torch::Tensor& got, const torch::Tensor& want) {
  const double scale = want.norm().item<double>();
  const double error = (got - want).norm().item<double>();
  return scale > 0 ? error / scale : error;
}

}  // namespace

const CandidateError& LayerReport::kept() const {
  for (const CandidateError& c : candidates) {
    if (c.method == method) return c;
  }
  return candidates.front();
}

nlohmann::json ConversionReport::to_json() const {
  nlohmann::json layers_json = nlohmann::json::array();
  for (const LayerReport& l : layers) {
    nlohmann::json candidates_json = nlohmann::json::array();
    for (const CandidateError& c : l.candidates) {
      candidates_json.push_back(
          {{"method", c.method}, {"map_error", c.map_error}, {"output_error", c.output_error}});
      if (c.explained_variance)
        candidates_json.back()["explained_variance"] = *c.explained_variance;
    }
    layers_json.push_back({{"layer", l.layer},
                           {"method", l.method},
                           {"map_error", l.kept().map_error},
                           {"output_error", l.kept().output_error},
                           {"candidates", candidates_json}});
  }
  nlohmann::json out = {{"source_attn", source_attn},
                        {"target_attn", target_attn},
                        {"rope_theta", rope_theta},
                        {"rope_scaling", std::string(rope_scaling_kind_name(rope_scaling.kind))},
                        {"rope_scaling_factor", rope_scaling.factor},
                        {"fit_tokens", fit_tokens},
                        {"held_out_tokens", held_out_tokens},
                        {"layers", layers_json}};
  if (rotary) {
    out["rotary"] = {
        {"first_pair", rotary->first_pair},
        {"stride", rotary->stride},
        {"pairs", rotary->pairs()},
        {"kept_contribution",
         rotary->total_contribution > 0 ? rotary->contribution / rotary->total_contribution : 0.0}};
  }
  return out;
}

std::string target_spec_text(std::string_view text, const ModelShape& shape) {
  std::string out(text);
  const std::optional<AttnFamily> family = attn_family_of(out);
  const bool gva = family == AttnFamily::kGva, mla = family == AttnFamily::kMla;
  if (!gva && !mla) return out;
  const auto add = [&](const std::string& item) {
    out += (out.find(':') == std::string::npos ? ":" : ",") + item;
  };
  const AttentionSpec probe = AttentionSpec::parse(out, shape, DType::kF32);
  if (out.find("dn=") == std::string::npos && probe.rope_dim > 0 &&
      probe.rope_dim < shape.head_dim) {
    add(fmt::format("dn={}", shape.head_dim - probe.rope_dim));
  }
  if (mla && !probe.plain_latent) add("plainlatent");
  return out;
}

AttentionSpec conversion_target(const ModelConfig& source, std::string_view target_text) {
  require_source(source);
  const AttentionSpec spec = AttentionSpec::parse(target_spec_text(target_text, source.shape),
                                                  source.shape, source.attn.cache_dtype);
  check_target(spec, source);
  return spec;
}

ConversionResult convert_model(nn::TransformerModelImpl& source, std::string_view target_text,
                               const Calibration& calibration,
                               const std::function<void(const std::string&)>& progress) {
  const auto say = [&](const std::string& line) {
    if (progress) progress(line);
  };
  const ModelConfig& from = source.config();
  require_source(from);
  const int64_t D = from.shape.d_model;
  const std::string text = target_spec_text(target_text, from.shape);
  const AttentionSpec probe = AttentionSpec::parse(text, from.shape, from.attn.cache_dtype);
  const bool rotary_target = check_target(probe, from);
  if (calibration.fit.dim() != 2 || calibration.held_out.dim() != 2 ||
      calibration.held_out.size(0) < 1) {
    throw SpecError("calibration", "needs fit and held-out windows of tokens [windows, tokens]");
  }
  if (calibration.fit.numel() < D + 1) {
    throw SpecError("calibration",
                    fmt::format("{} tokens to fit from; the least-squares fits need at least "
                                "d_model + 1 = {}",
                                calibration.fit.numel(), D + 1));
  }
  say(fmt::format("calibration: {} tokens to fit, {} held out", calibration.fit.numel(),
                  calibration.held_out.numel()));
  const LayerInputs inputs = collect_layer_inputs(source, calibration);
  const size_t n_layers = inputs.moments.size();
  std::vector<SourceAttention> layers;
  for (size_t l = 0; l < n_layers; ++l)
    layers.push_back(SourceAttention::from(*block(source, l).self_attn));

  ModelShape shape = from.shape;
  RotarySelection rotary;
  if (rotary_target) {
    torch::Tensor contributions;
    for (size_t l = 0; l < n_layers; ++l) {
      const torch::Tensor c = pair_contributions(layers[l], inputs.moments[l].mean());
      contributions = contributions.defined() ? contributions + c : c;
    }
    rotary = choose_rotary_pairs(contributions, probe.rope_dim);
    shape.rope_theta = rotary.rope_theta(from.shape.rope_theta, from.shape.head_dim);
    shape.rope_scaling =
        rotary.rope_scaling(from.shape.rope_scaling, from.shape.rope_theta, from.shape.head_dim);
    // the one definition of RoPE's frequencies must give every kept pair its source frequency
    for (int64_t i = 0; i < rotary.n_pairs; ++i) {
      const double want =
          rope_frequency(rotary.pairs()[static_cast<size_t>(i)], from.shape.head_dim,
                         from.shape.rope_theta, from.shape.rope_scaling);
      const double got = rope_frequency(i, probe.rope_dim, shape.rope_theta, shape.rope_scaling);
      if (std::abs(got - want) > 1e-9 * want) {
        throw std::logic_error(
            fmt::format("rotary pair {}: frequency {} where the source has {}", i, got, want));
      }
    }
    say(fmt::format("rotary pairs kept: {} (first {}, stride {}): {:.1f}% of the q·k contribution",
                    rotary.n_pairs, rotary.first_pair, rotary.stride,
                    100.0 * rotary.contribution / std::max(rotary.total_contribution, 1e-300)));
  }
  const ModelConfig config = ModelConfig::make(shape, text, from.attn.cache_dtype);
  ConversionResult result;
  result.model = nn::TransformerModel(
      config, torch::TensorOptions().dtype(source.parameters().front().scalar_type()));
  ConversionReport& report = result.report;
  report.source_attn = from.attn.to_string();
  report.target_attn = config.attn.to_string();
  if (rotary_target) report.rotary = rotary;
  report.rope_theta = shape.rope_theta;
  report.rope_scaling = shape.rope_scaling;
  report.fit_tokens = calibration.fit.numel();
  report.held_out_tokens = calibration.held_out.numel();

  {  // everything outside attention, as it is
    torch::NoGradGuard no_grad;
    const auto from_params = parameter_map(source);
    for (auto& [name, target] : parameter_map(*result.model)) {
      if (name.find(".self_attn.") != std::string::npos) continue;
      target.copy_(from_params.at(name));
    }
  }
  for (size_t l = 0; l < n_layers; ++l) {
    const std::shared_ptr<nn::AttentionImpl> reference =
        nn::make_attention(from.attn, torch::kFloat64);
    std::map<std::string, torch::Tensor> source_params;
    for (const auto& [name, t] : parameter_map(*block(source, l).self_attn)) {
      source_params.emplace(name, t.detach().to(torch::kFloat64));
    }
    load(*reference, source_params, "source layer " + std::to_string(l));
    const torch::Tensor x = inputs.held_out[l].to(torch::kFloat64);
    const Outputs want = run_layer(*reference, x);

    LayerReport layer_report;
    layer_report.layer = static_cast<int64_t>(l);
    std::map<std::string, torch::Tensor> kept;
    double best = 0;
    for (const LayerCandidate& candidate :
         convert_layer(layers[l], inputs.moments[l].mean(), config.attn, rotary)) {
      const std::shared_ptr<nn::AttentionImpl> converted =
          nn::make_attention(config.attn, torch::kFloat64);
      load(*converted, candidate.parameters, "converted layer " + std::to_string(l));
      const Outputs got = run_layer(*converted, x);
      const CandidateError e{candidate.method, relative_error(got.map, want.map),
                             relative_error(got.y, want.y), candidate.explained_variance};
      layer_report.candidates.push_back(e);
      if (kept.empty() || e.output_error < best) {
        best = e.output_error;
        kept = candidate.parameters;
        layer_report.method = candidate.method;
      }
    }
    load(*block(*result.model, l).self_attn, kept, "converted layer " + std::to_string(l));
    const CandidateError& kept_error = layer_report.kept();
    say(fmt::format("layer {}/{}: {}{} — attention-map error {:.3g}, output error {:.3g}", l + 1,
                    n_layers, layer_report.method,
                    kept_error.explained_variance
                        ? fmt::format(" ({:.1f}% of the key/value energy)",
                                      100 * *kept_error.explained_variance)
                        : "",
                    kept_error.map_error, kept_error.output_error));
    report.layers.push_back(std::move(layer_report));
  }
  return result;
}

}  // namespace kvlab::convert
