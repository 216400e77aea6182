#include "spec/rope_scaling.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "spec/spec_error.h"

namespace kvlab {
namespace {

double plain_frequency(int64_t pair, int64_t width, double theta) {
  return std::pow(theta, -2.0 * static_cast<double>(pair) / static_cast<double>(width));
}

// The pair index (fractional) that turns `rotations` times over `context` positions.
double yarn_correction_pair(double rotations, int64_t width, double theta, int64_t context) {
  return static_cast<double>(width) *
         std::log(static_cast<double>(context) / (rotations * 2 * std::numbers::pi)) /
         (2 * std::log(theta));
}

double llama3_frequency(const RopeScaling& s, double base) {
  const double wavelength = 2 * std::numbers::pi / base;
  const double context = static_cast<double>(s.original_context);
  if (wavelength < context / s.high_freq_factor) return base;            // short: kept
  if (wavelength > context / s.low_freq_factor) return base / s.factor;  // long: interpolated
  const double smooth =
      (context / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  return (1 - smooth) * base / s.factor + smooth * base;
}

double yarn_frequency(const RopeScaling& s, int64_t pair, int64_t width, double theta,
                      double base) {
  double low = std::floor(yarn_correction_pair(s.beta_fast, width, theta, s.original_context));
  double high = std::ceil(yarn_correction_pair(s.beta_slow, width, theta, s.original_context));
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(width - 1));
  if (low == high) high += 0.001;  // a ramp of one step, not a division by zero
  const double ramp = std::clamp((static_cast<double>(pair) - low) / (high - low), 0.0, 1.0);
  // ramp 0 (fast pairs): extrapolate, the plain frequency; ramp 1 (slow pairs): interpolate
  return base / s.factor * ramp + base * (1 - ramp);
}

void require_scaling(bool ok, const char* field, const std::string& rule) {
  if (!ok) throw SpecError(std::string("rope_scaling.") + field, rule);
}

}  // namespace

double RopeScaling::frequency(int64_t pair, int64_t width, double theta) const {
  const double base = plain_frequency(pair, width, theta);
  switch (kind) {
    case RopeScalingKind::kNone:
      return base;
    case RopeScalingKind::kLinear:
      return base / factor;
    case RopeScalingKind::kLlama3:
      return llama3_frequency(*this, base);
    case RopeScalingKind::kYarn:
      return yarn_frequency(*this, pair, width, theta, base);
  }
  return base;
}

void RopeScaling::validate() const {
  const auto finite_positive = [](double x) { return std::isfinite(x) && x > 0; };
  require_scaling(finite_positive(attention_factor), "attention_factor",
                  "must be a finite number > 0");
  require_scaling(std::isfinite(score_mscale) && score_mscale >= 0, "mscale_all_dim",
                  "must be a finite number >= 0");
  if (kind == RopeScalingKind::kNone) {
    require_scaling(factor == 1 && attention_factor == 1 && score_mscale == 0, "type",
                    "'none' takes no factor");
    return;
  }
  require_scaling(std::isfinite(factor) && factor >= 1, "factor",
                  "must be a finite number >= 1, got " + std::to_string(factor));
  if (kind == RopeScalingKind::kLinear) return;
  require_scaling(original_context > 0, "original_max_position_embeddings", "must be > 0");
  if (kind == RopeScalingKind::kLlama3) {
    require_scaling(finite_positive(low_freq_factor), "low_freq_factor",
                    "must be a finite number > 0");
    require_scaling(std::isfinite(high_freq_factor) && high_freq_factor > low_freq_factor,
                    "high_freq_factor", "must be greater than low_freq_factor");
    return;
  }
  require_scaling(finite_positive(beta_slow), "beta_slow", "must be a finite number > 0");
  require_scaling(std::isfinite(beta_fast) && beta_fast > beta_slow, "beta_fast",
                  "must be greater than beta_slow");
}

double RopeScaling::score_factor() const {
  if (score_mscale == 0) return 1.0;
  const double m = yarn_mscale(factor, score_mscale);
  return m * m;
}

double yarn_mscale(double factor, double mscale) {
  return factor <= 1 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

std::string_view rope_scaling_kind_name(RopeScalingKind kind) {
  switch (kind) {
    case RopeScalingKind::kNone:
      return "none";
    case RopeScalingKind::kLinear:
      return "linear";
    case RopeScalingKind::kLlama3:
      return "llama3";
    case RopeScalingKind::kYarn:
      return "yarn";
  }
  return "?";
}

RopeScalingKind parse_rope_scaling_kind(std::string_view text) {
  for (RopeScalingKind kind : {RopeScalingKind::kNone, RopeScalingKind::kLinear,
                               RopeScalingKind::kLlama3, RopeScalingKind::kYarn}) {
    if (rope_scaling_kind_name(kind) == text) return kind;
  }
  throw SpecError("rope_scaling.type",
                  "unknown '" + std::string(text) + "' (known: none, linear, llama3, yarn)");
}

}  // namespace kvlab
