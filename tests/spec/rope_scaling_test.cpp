// RoPE scaling: each type's frequencies against the formulas as transformers writes them
// (whole-vector form: wavelengths, masks, a ramp over the pairs), computed here independently
// of spec/rope_scaling.cpp's per-pair form; the Hugging Face config reader and writer; and
// every refusal by its field.
#include "spec/rope_scaling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <numbers>
#include <vector>

#include "io/hf_rope_scaling.h"
#include "spec/spec_error.h"

namespace kvlab {
namespace {

using nlohmann::json;
constexpr double kPi = std::numbers::pi;

std::vector<double> plain(int64_t dim, double base) {
  std::vector<double> f;
  for (int64_t i = 0; i < dim; i += 2) f.push_back(1.0 / std::pow(base, double(i) / double(dim)));
  return f;
}

// transformers' _compute_llama3_parameters
std::vector<double> llama3(int64_t dim, double base, double factor, double low, double high,
                           double old_context) {
  std::vector<double> inv = plain(dim, base), out;
  const double low_wavelen = old_context / low, high_wavelen = old_context / high;
  for (double f : inv) {
    const double wavelen = 2 * kPi / f;
    double g = wavelen > low_wavelen ? f / factor : f;
    const double smooth = (old_context / wavelen - low) / (high - low);
    const double smoothed = (1 - smooth) * g / factor + smooth * g;
    const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    out.push_back(medium ? smoothed : g);
  }
  return out;
}

// transformers' _compute_yarn_parameters (truncate = true)
std::vector<double> yarn(int64_t dim, double base, double factor, double beta_fast,
                         double beta_slow, double context) {
  const auto correction_dim = [&](double rotations) {
    return static_cast<double>(dim) * std::log(context / (rotations * 2 * kPi)) /
           (2 * std::log(base));
  };
  double low = std::max(std::floor(correction_dim(beta_fast)), 0.0);
  double high = std::min(std::ceil(correction_dim(beta_slow)), double(dim - 1));
  if (low == high) high += 0.001;
  std::vector<double> out;
  const std::vector<double> inv = plain(dim, base);
  for (size_t i = 0; i < inv.size(); ++i) {
    const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation_factor = 1 - ramp;
    const double interpolation = inv[i] / factor, extrapolation = inv[i];
    out.push_back(interpolation * (1 - extrapolation_factor) +
                  extrapolation * extrapolation_factor);
  }
  return out;
}

void expect_frequencies(const RopeScaling& s, int64_t dim, double base,
                        const std::vector<double>& expected) {
  ASSERT_EQ(expected.size(), static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    EXPECT_NEAR(s.frequency(i, dim, base), expected[static_cast<size_t>(i)],
                1e-12 * expected[static_cast<size_t>(i)])
        << "pair " << i;
  }
}

TEST(RopeScalingTest, FrequenciesMatchTransformersFormulas) {
  RopeScaling none;
  expect_frequencies(none, 64, 10000.0, plain(64, 10000.0));

  RopeScaling linear;
  linear.kind = RopeScalingKind::kLinear;
  linear.factor = 4;
  std::vector<double> quartered = plain(64, 10000.0);
  for (double& f : quartered) f /= 4;
  expect_frequencies(linear, 64, 10000.0, quartered);

  // Llama 3.1's published values: θ 500000, factor 8, low 1, high 4, 8192 positions
  RopeScaling l3;
  l3.kind = RopeScalingKind::kLlama3;
  l3.factor = 8;
  l3.low_freq_factor = 1;
  l3.high_freq_factor = 4;
  l3.original_context = 8192;
  const std::vector<double> expected = llama3(128, 500000.0, 8, 1, 4, 8192);
  expect_frequencies(l3, 128, 500000.0, expected);
  // all three regimes occur: kept, divided by 8, and blended
  const std::vector<double> base = plain(128, 500000.0);
  int kept = 0, divided = 0, blended = 0;
  for (size_t i = 0; i < base.size(); ++i) {
    if (expected[i] == base[i])
      ++kept;
    else if (std::abs(expected[i] - base[i] / 8) < 1e-15)
      ++divided;
    else
      ++blended;
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(blended, 0);

  // DeepSeek-V2's: rope dim 64, θ 10000, factor 40, 4096 positions, β 32 / 1
  RopeScaling y;
  y.kind = RopeScalingKind::kYarn;
  y.factor = 40;
  y.original_context = 4096;
  expect_frequencies(y, 64, 10000.0, yarn(64, 10000.0, 40, 32, 1, 4096));
  // Qwen-style: 128 wide, θ 1e6, factor 4, 32768 positions
  y.factor = 4;
  y.original_context = 32768;
  expect_frequencies(y, 128, 1e6, yarn(128, 1e6, 4, 32, 1, 32768));
}

TEST(RopeScalingTest, HuggingFaceConfigsReadWriteAndRefuseByField) {
  // DeepSeek-V2-Lite's rope_scaling
  const json v2 = {{"rope_scaling",
                    {{"type", "yarn"},
                     {"factor", 40},
                     {"original_max_position_embeddings", 4096},
                     {"beta_fast", 32},
                     {"beta_slow", 1},
                     {"mscale", 0.707},
                     {"mscale_all_dim", 0.707}}}};
  const RopeScaling ds = read_hf_rope_scaling(v2, 163840, /*deepseek=*/true);
  EXPECT_EQ(ds.kind, RopeScalingKind::kYarn);
  EXPECT_DOUBLE_EQ(ds.attention_factor, 1.0);  // mscale / mscale_all_dim
  const double m = 0.1 * 0.707 * std::log(40.0) + 1.0;
  EXPECT_DOUBLE_EQ(ds.score_factor(), m * m);
  EXPECT_EQ(ds.score_mscale, 0.707);
  // the same block on a Llama-style model scales cos/sin only (transformers' Llama)
  const RopeScaling llama = read_hf_rope_scaling(v2, 163840, /*deepseek=*/false);
  EXPECT_DOUBLE_EQ(llama.score_factor(), 1.0);
  // without mscale keys: 0.1 ln(factor) + 1 on cos and sin; original context defaults to
  // max_position_embeddings
  const RopeScaling plain_yarn = read_hf_rope_scaling(
      {{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}}}, 4096, false);
  EXPECT_DOUBLE_EQ(plain_yarn.attention_factor, 0.1 * std::log(4.0) + 1.0);
  EXPECT_EQ(plain_yarn.original_context, 4096);
  // transformers 5's rope_parameters carries the type beside rope_theta
  const RopeScaling params = read_hf_rope_scaling(
      {{"rope_parameters", {{"rope_type", "linear"}, {"factor", 2.0}, {"rope_theta", 1e4}}}}, 64,
      false);
  EXPECT_EQ(params.kind, RopeScalingKind::kLinear);
  EXPECT_EQ(read_hf_rope_scaling({{"rope_scaling", nullptr}}, 64, false), RopeScaling{});

  // written and read back, for each type
  for (const RopeScaling& s : {ds, llama, plain_yarn, params}) {
    for (bool deepseek : {false, true}) {
      if (!deepseek && s.score_mscale != 0) continue;
      const json config = {{"rope_scaling", hf_rope_scaling_json(s, deepseek)}};
      const RopeScaling back = read_hf_rope_scaling(config, 4096, deepseek);
      EXPECT_EQ(back.kind, s.kind);
      EXPECT_DOUBLE_EQ(back.factor, s.factor);
      EXPECT_DOUBLE_EQ(back.attention_factor, s.attention_factor);
      EXPECT_EQ(back.score_mscale, s.score_mscale);
      EXPECT_EQ(rope_scaling_from_json(rope_scaling_to_json(s), "x"), s);
    }
  }

  const auto error = [](const json& block) -> std::string {
    try {
      read_hf_rope_scaling({{"rope_scaling", block}}, 4096, false);
    } catch (const SpecError& e) {
      return e.field() + ": " + e.what();
    }
    return "(read)";
  };
  const auto has = [](const std::string& s, const std::string& part) {
    return s.find(part) != std::string::npos;
  };
  EXPECT_TRUE(has(error({{"type", "dynamic"}, {"factor", 2.0}}), "sequence run")) << "dynamic";
  EXPECT_TRUE(has(error({{"type", "longrope"}}), "rope_scaling: rope type 'longrope'"));
  EXPECT_TRUE(has(error({{"type", "ntk"}}), "unknown rope type 'ntk'"));
  EXPECT_TRUE(has(error({{"type", "llama3"}, {"factor", 8.0}}),
                  "rope_scaling.low_freq_factor: missing (required for llama3)"));
  EXPECT_TRUE(has(error({{"type", "linear"}}), "rope_scaling.factor: missing"));
  EXPECT_TRUE(has(error({{"type", "linear"}, {"factor", 0.5}}), "must be a finite number >= 1"));
  EXPECT_TRUE(
      has(error({{"type", "linear"}, {"factor", "2"}}), "rope_scaling.factor: expected a number"));
  EXPECT_TRUE(has(error({{"type", "linear"}, {"factor", 2.0}, {"beta_fast", 3}}),
                  "rope_scaling.beta_fast: is not a key kvlab applies for rope type 'linear'"));
  EXPECT_TRUE(has(error({{"type", "yarn"}, {"factor", 2.0}, {"truncate", false}}),
                  "rope_scaling.truncate"));
  EXPECT_TRUE(has(error({{"type", "yarn"}, {"factor", 2.0}, {"beta_fast", 0.5}}),
                  "beta_fast: must be greater than beta_slow"));
  EXPECT_TRUE(has(error({{"type", "linear"}, {"factor", 2.0}, {"partial_rotary_factor", 0.5}}),
                  "partial_rotary_factor"));
  EXPECT_TRUE(has(error(json::array()), "rope_scaling: expected an object"));
  EXPECT_TRUE(has(error({{"factor", 2.0}}), "has neither rope_type nor type"));
}

}  // namespace
}  // namespace kvlab
