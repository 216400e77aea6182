// kvlab convert: sources built to be representable by the target must convert with errors at
// float precision, against formulas computed here (not by the converter's own modules).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "convert/convert_model.h"
#include "spec/spec_error.h"

namespace kvlab {
namespace {

constexpr double kTheta = 10000.0;

ModelShape llama_shape(PosScheme pos = PosScheme::kRope, BiasKind bias = BiasKind::kNone) {
  ModelShape s = ModelShape::llama_decoder(/*n_layers=*/2, /*d_model=*/32, /*n_heads=*/4,
                                           /*mlp_width=*/48, /*vocab_size=*/256,
                                           /*max_context=*/64, kTheta);
  s.pos = pos;
  s.bias = bias;
  return s;
}

nn::TransformerModel make_model(const ModelShape& shape, const std::string& attn, uint64_t seed) {
  torch::manual_seed(seed);
  return nn::TransformerModel(ModelConfig::make(shape, attn, DType::kF32), torch::kFloat64);
}

convert::Calibration calibration(uint64_t seed, int64_t fit_windows = 24) {
  torch::manual_seed(seed);
  return {torch::randint(0, 256, {fit_windows, 24}, torch::kLong),
          torch::randint(0, 256, {3, 24}, torch::kLong)};
}

nn::AttentionImpl& attention(nn::TransformerModelImpl& m, size_t layer) {
  return *(*m.model->layers)[layer]->as<nn::TransformerBlockImpl>()->self_attn;
}

torch::Tensor param(nn::AttentionImpl& a, const std::string& name) {
  return a.named_parameters()[name];
}

double relative(const torch::Tensor& got, const torch::Tensor& want) {
  return (got - want).norm().item<double>() / want.norm().item<double>();
}

torch::Tensor logits(nn::TransformerModelImpl& m, const torch::Tensor& tokens) {
  torch::NoGradGuard no_grad;
  return m.forward(tokens);
}

// Rotates pairs (p, p + d/2) of x [B, T, n, d] for the listed pairs at the source frequencies
// θ^(−2p/d) and positions 0 .., leaving every other channel as it is.
torch::Tensor rotate_pairs(const torch::Tensor& x, const std::vector<int64_t>& pairs) {
  const int64_t d = x.size(3), t = x.size(1);
  torch::Tensor out = x.clone();
  for (const int64_t p : pairs) {
    const double frequency =
        std::pow(kTheta, -2.0 * static_cast<double>(p) / static_cast<double>(d));
    const torch::Tensor angle = torch::arange(t, x.options()).mul(frequency).view({1, t, 1});
    const torch::Tensor a = x.select(3, p), b = x.select(3, p + d / 2);
    out.select(3, p).copy_(a * angle.cos() - b * angle.sin());
    out.select(3, p + d / 2).copy_(b * angle.cos() + a * angle.sin());
  }
  return out;
}

// The source layer's output with RoPE on `pairs` only (the approximation a rotary conversion
// makes before fitting), computed from its weights: x [B, T, D] -> [B, T, D].
torch::Tensor partial_rope_attention(nn::AttentionImpl& a, const torch::Tensor& x,
                                     const std::vector<int64_t>& pairs) {
  torch::NoGradGuard no_grad;
  const AttentionSpec& s = a.spec();
  const int64_t b = x.size(0), t = x.size(1), H = s.n_heads, G = s.n_groups, d = s.head_dim;
  const auto project = [&](const char* name, int64_t n) {
    return torch::matmul(x, param(a, std::string(name) + ".weight").t()).view({b, t, n, d});
  };
  const torch::Tensor q = rotate_pairs(project("q_proj", H), pairs);
  const torch::Tensor k = rotate_pairs(project("k_proj", G), pairs).repeat_interleave(H / G, 2);
  const torch::Tensor v = project("v_proj", G).repeat_interleave(H / G, 2);
  torch::Tensor scores =
      torch::einsum("bqhd,bkhd->bhqk", {q, k}) / std::sqrt(static_cast<double>(d));
  const torch::Tensor mask = torch::ones({t, t}, torch::kBool).triu(1);
  scores = scores.masked_fill(mask, -INFINITY).softmax(-1);
  const torch::Tensor heads = torch::einsum("bhqk,bkhd->bqhd", {scores, v}).reshape({b, t, H * d});
  return torch::matmul(heads, param(a, "o_proj.weight").t());
}

// Plants a source whose keys a gva/gta target can hold: on `pairs` the key rows are equal in
// every group (and scaled up, so that the selection picks them); on the other channels each
// group's key is M*_gᵀ v_g for a random M*_g (d × d_n).
void plant_grouped_value_keys(nn::TransformerModelImpl& m, const std::vector<int64_t>& pairs) {
  torch::NoGradGuard no_grad;
  for (size_t l = 0; l < m.model->layers->size(); ++l) {
    nn::AttentionImpl& a = attention(m, l);
    const AttentionSpec& s = a.spec();
    const int64_t G = s.n_groups, d = s.head_dim, D = s.d_model;
    std::vector<int64_t> rotary, content;
    for (const int64_t p : pairs) rotary.push_back(p);
    for (const int64_t p : pairs) rotary.push_back(p + d / 2);
    for (int64_t c = 0; c < d; ++c) {
      if (std::find(rotary.begin(), rotary.end(), c) == rotary.end()) content.push_back(c);
    }
    const torch::Tensor k = param(a, "k_proj.weight").view({G, d, D});
    const torch::Tensor v = param(a, "v_proj.weight").view({G, d, D});
    const torch::Tensor q = param(a, "q_proj.weight").view({s.n_heads, d, D});
    const auto dn = static_cast<int64_t>(content.size());
    for (int64_t g = 0; g < G; ++g) {
      const torch::Tensor planted =
          torch::matmul(torch::randn({dn, d}, v.options()) / std::sqrt(d), v[g]);
      for (size_t i = 0; i < content.size(); ++i)
        k[g][content[i]].copy_(planted[static_cast<int64_t>(i)]);
      for (const int64_t c : rotary) k[g][c].copy_(k[0][c] * (g == 0 ? 4.0 : 1.0));
    }
    for (const int64_t c : rotary) q.select(1, c).mul_(4.0);
  }
}

TEST(ConvertTest, MhaToMhaAndGqaToItsOwnGroupsChangeNothing) {
  for (const char* attn : {"mha", "gqa:2"}) {
    SCOPED_TRACE(attn);
    nn::TransformerModel source = make_model(llama_shape(), attn, 1);
    convert::ConversionResult r = convert::convert_model(*source, attn, calibration(2));
    const torch::Tensor tokens = calibration(3).held_out;
    EXPECT_TRUE(torch::equal(logits(*r.model, tokens), logits(*source, tokens)));
    const auto converted = r.model->named_parameters();
    for (const auto& item : source->named_parameters()) {
      EXPECT_TRUE(torch::equal(converted[item.key()], item.value()))
          << item.key() << converted[item.key()].dtype() << item.value().dtype()
          << (converted[item.key()] - item.value()).abs().max();
    }
    for (const convert::LayerReport& l : r.report.layers) {
      EXPECT_EQ(l.method, "copy");
      EXPECT_EQ(l.kept().output_error, 0.0);
    }
  }
}

TEST(ConvertTest, FewerGroupsMeanPoolKeysAndValuesAndCopyEverythingElse) {
  nn::TransformerModel source = make_model(llama_shape(), "mha", 4);
  convert::ConversionResult r = convert::convert_model(*source, "gqa:2", calibration(5));
  EXPECT_EQ(r.report.target_attn, "gqa:2");
  for (size_t l = 0; l < 2; ++l) {
    // group g of 2 holds source heads 2g and 2g+1: its key rows are their mean
    const torch::Tensor k = param(attention(*source, l), "k_proj.weight").view({2, 2, 8, 32});
    EXPECT_TRUE(torch::allclose(param(attention(*r.model, l), "k_proj.weight").view({2, 8, 32}),
                                (k.select(1, 0) + k.select(1, 1)) / 2, 1e-14, 1e-14));
    EXPECT_EQ(r.report.layers[l].method, "mean-pool");
    EXPECT_GT(r.report.layers[l].kept().output_error, 1e-3);  // pooling distinct heads loses
  }
  const auto converted = r.model->named_parameters();
  for (const auto& item : source->named_parameters()) {
    if (item.key().find(".self_attn.") != std::string::npos) continue;
    EXPECT_TRUE(torch::equal(converted[item.key()], item.value())) << item.key();
  }
}

TEST(ConvertTest, EqualKeyAndValueProjectionsConvertExactlyToSharedKv) {
  for (const char* target : {"q-gqa:2", "q-mqa"}) {
    SCOPED_TRACE(target);
    nn::TransformerModel source = make_model(llama_shape(), "gqa:2", 6);
    {
      torch::NoGradGuard no_grad;
      for (size_t l = 0; l < 2; ++l) {
        nn::AttentionImpl& a = attention(*source, l);
        // q-mqa merges both groups: make them equal too
        const torch::Tensor k = param(a, "k_proj.weight").view({2, 8, 32});
        k[1].copy_(k[0]);
        param(a, "v_proj.weight").copy_(param(a, "k_proj.weight"));
      }
    }
    convert::ConversionResult r = convert::convert_model(*source, target, calibration(7));
    for (const convert::LayerReport& l : r.report.layers) {
      ASSERT_EQ(l.candidates.size(), 4u);
      for (const convert::CandidateError& c : l.candidates) {
        EXPECT_LT(c.output_error, 1e-9) << c.method;
        EXPECT_LT(c.map_error, 1e-9) << c.method;
      }
    }
    const torch::Tensor tokens = calibration(8).held_out;
    EXPECT_LT(relative(logits(*r.model, tokens), logits(*source, tokens)), 1e-10);
  }
}

TEST(ConvertTest, SharedKvFromDistinctProjectionsReportsEveryCandidateAndKeepsTheBest) {
  nn::TransformerModel source = make_model(llama_shape(), "gqa:2", 9);
  convert::ConversionResult r = convert::convert_model(*source, "q-gqa:2", calibration(10));
  for (const convert::LayerReport& l : r.report.layers) {
    ASSERT_EQ(l.candidates.size(), 4u);
    double best = INFINITY;
    for (const convert::CandidateError& c : l.candidates) {
      EXPECT_TRUE(std::isfinite(c.output_error) && c.output_error > 1e-3) << c.method;
      best = std::min(best, c.output_error);
    }
    EXPECT_EQ(l.kept().output_error, best);
  }
}

struct RotaryCase {
  std::vector<int64_t> pairs;  // the planted rotary pairs of a head of width 8
  int64_t first, stride;
  double theta;   // the converted model's RoPE base: θ^(stride·d_r/d)
  double factor;  // its linear scaling: θ^(2·first/d)
};

class ConvertRotaryTest : public ::testing::TestWithParam<std::tuple<std::string, RotaryCase>> {};

TEST_P(ConvertRotaryTest, PlantedKeysConvertExactlyAgainstTheSourceWithPartialRope) {
  const auto& [target, c] = GetParam();
  nn::TransformerModel source = make_model(llama_shape(), "gqa:2", 11);
  torch::manual_seed(12);
  plant_grouped_value_keys(*source, c.pairs);
  convert::ConversionResult r = convert::convert_model(*source, target, calibration(13));
  ASSERT_TRUE(r.report.rotary.has_value());
  EXPECT_EQ(r.report.rotary->pairs(), c.pairs);
  EXPECT_EQ(r.report.rotary->first_pair, c.first);
  EXPECT_EQ(r.report.rotary->stride, c.stride);
  EXPECT_NEAR(r.model->config().shape.rope_theta, c.theta, 1e-9 * c.theta);
  const RopeScaling& scaling = r.model->config().shape.rope_scaling;
  if (c.factor == 1.0) {
    EXPECT_EQ(scaling.kind, RopeScalingKind::kNone);
  } else {
    EXPECT_EQ(scaling.kind, RopeScalingKind::kLinear);
    EXPECT_NEAR(scaling.factor, c.factor, 1e-9 * c.factor);
  }
  torch::manual_seed(14);
  const torch::Tensor x = torch::randn({2, 20, 32}, torch::kFloat64);
  for (size_t l = 0; l < 2; ++l) {
    torch::NoGradGuard no_grad;
    const torch::Tensor want = partial_rope_attention(attention(*source, l), x, c.pairs);
    const torch::Tensor got = attention(*r.model, l).forward(x);
    EXPECT_LT(relative(got, want), 1e-9) << "layer " << l;
    EXPECT_FALSE(torch::isnan(got).any().item<bool>());
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, ConvertRotaryTest,
                         ::testing::Combine(::testing::Values("gva:2,dr=4", "gta:2,dr=4"),
                                            ::testing::Values(RotaryCase{{0, 1}, 0, 1, 100.0, 1.0},
                                                              RotaryCase{
                                                                  {1, 3}, 1, 2, kTheta, 10.0})),
                         [](const auto& test) {
                           std::string name = std::get<0>(test.param) + "_pairs";
                           for (const int64_t p : std::get<1>(test.param).pairs)
                             name += std::to_string(p);
                           for (char& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

TEST(ConvertTest, MlaIsExactWhenKeysAndValuesHaveRankAtMostTheLatentWidth) {
  // content keys and values of both groups built from 10 shared directions of x; the rotary
  // pairs {0, 1} equal in both groups: mla:dc=10 holds them exactly, dc=6 cannot
  nn::TransformerModel source = make_model(llama_shape(), "gqa:2", 24);
  const std::vector<int64_t> pairs = {0, 1};
  torch::manual_seed(25);
  plant_grouped_value_keys(*source, pairs);
  {
    torch::NoGradGuard no_grad;
    for (size_t l = 0; l < 2; ++l) {
      nn::AttentionImpl& a = attention(*source, l);
      const torch::Tensor basis = torch::randn({10, 32}, torch::kFloat64) / std::sqrt(32.0);
      const torch::Tensor k = param(a, "k_proj.weight").view({2, 8, 32});
      for (int64_t g = 0; g < 2; ++g) {
        for (const int64_t c : {2, 3, 6, 7})
          k[g][c].copy_(torch::matmul(torch::randn({10}, torch::kFloat64), basis));
      }
      param(a, "v_proj.weight")
          .copy_(torch::matmul(torch::randn({16, 10}, torch::kFloat64), basis));
    }
  }
  convert::ConversionResult r = convert::convert_model(*source, "mla:dc=10,dr=4", calibration(26));
  EXPECT_EQ(r.report.target_attn, "mla:dc=10,dr=4,dn=4,plainlatent");
  EXPECT_EQ(r.report.rotary->pairs(), pairs);
  torch::manual_seed(27);
  const torch::Tensor x = torch::randn({2, 20, 32}, torch::kFloat64);
  for (size_t l = 0; l < 2; ++l) {
    torch::NoGradGuard no_grad;
    EXPECT_NEAR(*r.report.layers[l].kept().explained_variance, 1.0, 1e-12);
    const torch::Tensor want = partial_rope_attention(attention(*source, l), x, pairs);
    EXPECT_LT(relative(attention(*r.model, l).forward(x), want), 1e-9) << "layer " << l;
  }
  // a narrower latent keeps the leading directions only
  convert::ConversionResult narrow =
      convert::convert_model(*source, "mla:dc=6,dr=4", calibration(26));
  for (const convert::LayerReport& l : narrow.report.layers) {
    EXPECT_LT(*l.kept().explained_variance, 0.999);
    EXPECT_GT(l.kept().output_error, 1e-3);
  }
}

TEST(ConvertTest, GvaWithoutDecoupledRopeIsExactForKeysInTheSpanOfTheValues) {
  // dr = 0: the reconstructed key is rotated over its full width as the source's was, so the
  // whole model converts exactly when every key is a linear map of its group's value
  nn::TransformerModel source = make_model(llama_shape(), "gqa:2", 15);
  {
    torch::NoGradGuard no_grad;
    for (size_t l = 0; l < 2; ++l) {
      nn::AttentionImpl& a = attention(*source, l);
      const torch::Tensor k = param(a, "k_proj.weight").view({2, 8, 32});
      const torch::Tensor v = param(a, "v_proj.weight").view({2, 8, 32});
      for (int64_t g = 0; g < 2; ++g)
        k[g].copy_(torch::matmul(torch::randn({8, 8}, v.options()), v[g]));
    }
  }
  convert::ConversionResult r = convert::convert_model(*source, "gva:2,dr=0", calibration(16));
  EXPECT_FALSE(r.report.rotary.has_value());
  const torch::Tensor tokens = calibration(17).held_out;
  EXPECT_LT(relative(logits(*r.model, tokens), logits(*source, tokens)), 1e-9);
  for (const convert::LayerReport& l : r.report.layers) EXPECT_LT(l.kept().output_error, 1e-9);
}

TEST(ConvertTest, LearnedPositionGptConvertsToSharedKv) {
  // GPT-2 style blocks (LayerNorm, biases everywhere, learned positions): K=V needs no RoPE
  ModelShape gpt = ModelShape::gpt_decoder(/*n_layers=*/2, /*d_model=*/32, /*n_heads=*/4,
                                           /*vocab_size=*/256, /*max_context=*/64);
  nn::TransformerModel source = make_model(gpt, "mha", 28);
  {
    torch::NoGradGuard no_grad;
    for (size_t l = 0; l < 2; ++l) {
      nn::AttentionImpl& a = attention(*source, l);
      param(a, "v_proj.weight").copy_(param(a, "k_proj.weight"));
      param(a, "v_proj.bias").copy_(param(a, "k_proj.bias"));
    }
  }
  convert::ConversionResult r = convert::convert_model(*source, "q-kv", calibration(29));
  const torch::Tensor tokens = calibration(30).held_out;
  EXPECT_LT(relative(logits(*r.model, tokens), logits(*source, tokens)), 1e-10);
}

TEST(ConvertTest, BiasesConvertWithTheirProjections) {
  nn::TransformerModel source =
      make_model(llama_shape(PosScheme::kRope, BiasKind::kQkv), "gqa:2", 18);
  {
    torch::NoGradGuard no_grad;
    for (size_t l = 0; l < 2; ++l) {
      nn::AttentionImpl& a = attention(*source, l);
      param(a, "v_proj.weight").copy_(param(a, "k_proj.weight"));
      param(a, "v_proj.bias").copy_(param(a, "k_proj.bias").normal_());
    }
  }
  convert::ConversionResult r = convert::convert_model(*source, "q-gqa:2", calibration(19));
  for (const convert::LayerReport& l : r.report.layers) EXPECT_LT(l.kept().output_error, 1e-10);
}

TEST(ConvertTest, RefusesWhatCannotBeConvertedNamingTheField) {
  const auto field_of = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const SpecError& e) {
      return std::string(e.field()) + ": " + e.what();
    }
    return std::string("no error");
  };
  nn::TransformerModel rope = make_model(llama_shape(), "gqa:2", 20);
  ModelShape learned_shape = llama_shape(PosScheme::kLearned);
  nn::TransformerModel learned = make_model(learned_shape, "gqa:2", 21);
  const convert::Calibration cal = calibration(22);
  EXPECT_NE(field_of([&] { convert::convert_model(*learned, "gva:2,dr=4", cal); }).find("attn: "),
            std::string::npos);
  EXPECT_NE(
      field_of([&] { convert::convert_model(*learned, "gva:2,dr=4", cal); }).find("positions"),
      std::string::npos);
  EXPECT_NE(field_of([&] { convert::convert_model(*rope, "mha", cal); }).find("do not divide"),
            std::string::npos);
  EXPECT_NE(field_of([&] { convert::convert_model(*rope, "mla:dq=8", cal); }).find("dq"),
            std::string::npos);
  EXPECT_NE(field_of([&] { convert::convert_model(*rope, "gla:hc=2", cal); }).find("gla"),
            std::string::npos);
  EXPECT_NE(field_of([&] { convert::convert_model(*rope, "qk-v", cal); }).find("attn: "),
            std::string::npos);
  EXPECT_NE(
      field_of([&] { convert::convert_model(*rope, "gva:2,dr=4,dn=2", cal); }).find("dn + dr"),
      std::string::npos);
  const convert::Calibration tiny{cal.fit.narrow(0, 0, 1), cal.held_out};
  EXPECT_NE(field_of([&] { convert::convert_model(*rope, "gqa:1", tiny); }).find("calibration: "),
            std::string::npos);
  nn::TransformerModel kv = make_model(llama_shape(), "q-gqa:2", 23);
  EXPECT_NE(field_of([&] { convert::convert_model(*kv, "gqa:1", cal); }).find("checkpoint: "),
            std::string::npos);
}

}  // namespace
}  // namespace kvlab
