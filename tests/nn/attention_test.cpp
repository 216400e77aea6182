#include "nn/attention.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "nn/gva_attention.h"
#include "nn/linear_attention.h"
#include "nn/mla_attention.h"
#include "nn/nn_test_util.h"
#include "nn/standard_attention.h"

namespace kvlab::nn {
namespace {

using testing::copy_into;
using testing::kF64;
using testing::max_abs_diff;
using testing::small_shape;
using testing::spec_of;

struct VariantCase {
  std::string text;
  ModelShape shape;
};

// Every variant, on the positional scheme it is meant for, plus awkward options.
std::vector<VariantCase> every_variant() {
  const ModelShape rope = small_shape(PosScheme::kRope);
  const ModelShape learned = small_shape(PosScheme::kLearned);
  const ModelShape encoder = small_shape(PosScheme::kLearned, ModelKind::kEncoder);
  const ModelShape no_bias = small_shape(PosScheme::kRope, ModelKind::kDecoder, BiasKind::kNone);
  return {
      {"mha", rope},
      {"mha", learned},
      {"gqa:2", rope},
      {"mqa", rope},
      {"qk-v", learned},
      {"qk-v", rope},
      {"q-kv", learned},
      {"q-kv", rope},
      {"q-kv:knorm", rope},
      {"qkv1", learned},
      {"qkv1:knorm", rope},
      {"q-gqa:2", rope},
      {"q-gqa:2,knorm", no_bias},
      {"q-mqa", rope},
      {"qk-v+", encoder},
      {"qkv1+:m=6", encoder},
      {"mla", rope},
      {"mla:dc=12,dr=4,dn=6,dv=2,dq=10", learned},
      {"mla", no_bias},
      {"mla:dc=12,dr=4,plainlatent", rope},
      {"gva:2,dr=4", rope},
      {"gva:1,dr=2,qnorm", rope},
      {"gva:4,dr=4,dn=6,init=scale-matched", learned},
      {"gva:2,dr=0", rope},
      {"gva:2,dr=0,init=variance-fixed", no_bias},
      {"gta:2", rope},
      {"gta:4", learned},
      {"gta:1", no_bias},
      {"gla:hc=2", rope},
      {"gla:hc=4,dc=6,dr=2", learned},
      {"gla:hc=1", no_bias},
      {"linear", learned},
      {"mha", encoder},
      {"gva:2,dr=4", encoder},
      {"gta:2", encoder},
      {"gla:hc=2", encoder},
      {"linear", encoder},
  };
}

std::string case_name(const VariantCase& c) {
  return c.text + " pos=" + std::string(pos_scheme_name(c.shape.pos)) +
         " kind=" + std::string(model_kind_name(c.shape.kind)) +
         " bias=" + std::string(bias_kind_name(c.shape.bias));
}

int64_t module_params(const torch::nn::Module& m) {
  int64_t total = 0;
  for (const auto& p : m.parameters()) total += p.numel();
  return total;
}

TEST(AttentionModuleTest, ParameterCountEqualsTheSpecs) {
  for (const VariantCase& c : every_variant()) {
    SCOPED_TRACE(case_name(c));
    const AttentionSpec spec = spec_of(c.text, c.shape);
    const auto module = make_attention(spec, kF64);
    EXPECT_EQ(module_params(*module), spec.param_count().value());
  }
}

TEST(AttentionModuleTest, OutputsAreFiniteAndShaped) {
  torch::manual_seed(1);
  for (const VariantCase& c : every_variant()) {
    SCOPED_TRACE(case_name(c));
    const auto module = make_attention(spec_of(c.text, c.shape), kF64);
    const torch::Tensor x = torch::randn({3, 7, 16}, kF64);
    const torch::Tensor y = module->forward(x);
    EXPECT_EQ(y.sizes(), x.sizes());
    EXPECT_TRUE(torch::isfinite(y).all().item<bool>());
  }
}

TEST(AttentionModuleTest, CausalVariantsNeverLookAhead) {
  torch::manual_seed(2);
  for (const VariantCase& c : every_variant()) {
    if (c.shape.kind != ModelKind::kDecoder) continue;
    SCOPED_TRACE(case_name(c));
    const auto module = make_attention(spec_of(c.text, c.shape), kF64);
    const torch::Tensor x = torch::randn({2, 9, 16}, kF64);
    torch::Tensor changed = x.clone();
    changed.narrow(1, 5, 4).normal_();
    const torch::Tensor a = module->forward(x), b = module->forward(changed);
    EXPECT_LT(max_abs_diff(a.narrow(1, 0, 5), b.narrow(1, 0, 5)), 1e-12);
    EXPECT_GT(max_abs_diff(a.narrow(1, 5, 4), b.narrow(1, 5, 4)), 1e-6);  // the test can fail
  }
}

TEST(AttentionModuleTest, NonCausalVariantsDoLookAhead) {
  torch::manual_seed(3);
  for (const VariantCase& c : every_variant()) {
    if (c.shape.kind == ModelKind::kDecoder) continue;
    SCOPED_TRACE(case_name(c));
    const auto module = make_attention(spec_of(c.text, c.shape), kF64);
    const torch::Tensor x = torch::randn({2, 9, 16}, kF64);
    torch::Tensor changed = x.clone();
    changed.narrow(1, 8, 1).normal_();
    EXPECT_GT(
        max_abs_diff(module->forward(x).narrow(1, 0, 1), module->forward(changed).narrow(1, 0, 1)),
        1e-9);
  }
}

// The rows a module reports are exactly the spec's cache layout, and attending to them in
// the decode form (absorbed / rotate-on-read) reproduces the explicit forward pass — for the
// whole sequence at once and for a suffix decoded after a prefix.
TEST(AttentionModuleTest, CacheRowsThroughTheDecodeFormEqualForward) {
  torch::manual_seed(4);
  for (const VariantCase& c : every_variant()) {
    const AttentionSpec spec = spec_of(c.text, c.shape);
    const CacheLayout layout = spec.cache_layout();
    if (c.shape.kind != ModelKind::kDecoder || layout.kernel == DecodeKernel::kRecurrentState) {
      continue;
    }
    SCOPED_TRACE(case_name(c));
    const auto module = make_attention(spec, kF64);
    const int64_t batch = 2, seq = 11;
    const torch::Tensor x = torch::randn({batch, seq, 16}, kF64);
    const std::vector<torch::Tensor> rows = module->cache_rows(x);
    ASSERT_EQ(rows.size(), layout.streams.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      const CacheStream& stream = layout.streams[i];
      EXPECT_EQ(rows[i].sizes(),
                torch::IntArrayRef({batch, seq, stream.n_heads, stream.head_width}))
          << stream.name();
    }
    const torch::Tensor full = module->forward(x);
    EXPECT_LT(max_abs_diff(module->forward_from_cache(x, rows, 0), full), 1e-10);
    for (int64_t prefix : {1, 6, 10}) {
      const torch::Tensor tail = x.narrow(1, prefix, seq - prefix);
      EXPECT_LT(max_abs_diff(module->forward_from_cache(tail, rows, prefix),
                             full.narrow(1, prefix, seq - prefix)),
                1e-10)
          << "prefix " << prefix;
      // the tail's own explicit forward at its true positions agrees too (RoPE offsets)
      if (spec.pos != PosScheme::kLearned) {
        const std::vector<torch::Tensor> prefix_rows = module->cache_rows(x.narrow(1, 0, prefix));
        const std::vector<torch::Tensor> tail_rows = module->cache_rows(tail, prefix);
        std::vector<torch::Tensor> joined;
        for (size_t i = 0; i < rows.size(); ++i) {
          joined.push_back(torch::cat({prefix_rows[i], tail_rows[i]}, 1));
          EXPECT_LT(max_abs_diff(joined[i], rows[i]), 1e-12);
        }
      }
    }
  }
}

TEST(AttentionModuleTest, LinearAttentionParallelEqualsRecurrent) {
  torch::manual_seed(5);
  const ModelShape shape = small_shape(PosScheme::kLearned);
  auto module = std::dynamic_pointer_cast<LinearAttentionImpl>(
      make_attention(spec_of("linear", shape), kF64));
  ASSERT_TRUE(module);
  const torch::Tensor x = torch::randn({3, 13, 16}, kF64);
  EXPECT_LT(max_abs_diff(module->forward(x), module->forward_recurrent(x)), 1e-12);
  // the state is constant-size: H·(d_h² + d_h) scalars per sequence, as the layout says
  const auto state = module->initial_state(1, kF64);
  EXPECT_EQ(state.kv.numel() + state.sum.numel(),
            spec_of("linear", shape).cache_layout().state_scalars);
}

// Copies every weight of `from` whose name also exists in `to`.
void copy_same_names(torch::nn::Module& to, const torch::nn::Module& from) {
  const auto src = from.named_parameters();
  for (auto& item : to.named_parameters()) {
    if (src.contains(item.key())) copy_into(item.value(), src[item.key()]);
  }
}

// Specs that name the same function: gqa with G = H is mha, mqa is gqa:1, q-gqa with
// G = H is q-kv. Built on the same weights they give the same outputs.
TEST(AttentionOracleTest, EquivalentSpecsComputeTheSameFunction) {
  const std::pair<const char*, const char*> pairs[] = {
      {"mha", "gqa:4"}, {"gqa:1", "mqa"}, {"q-kv:knorm", "q-gqa:4,knorm"}, {"q-mqa", "q-gqa:1"}};
  const ModelShape shape = small_shape(PosScheme::kRope);
  for (const auto& [reference_text, other_text] : pairs) {
    SCOPED_TRACE(std::string(reference_text) + " vs " + other_text);
    torch::manual_seed(6);
    auto reference = make_attention(spec_of(reference_text, shape), kF64);
    auto other = make_attention(spec_of(other_text, shape), kF64);
    copy_same_names(*other, *reference);
    const torch::Tensor x = torch::randn({2, 8, 16}, kF64);
    EXPECT_LT(max_abs_diff(other->forward(x), reference->forward(x)), 1e-12);
  }
}

// Sharing is one tensor used twice: the shared variants equal MHA with the tied weights
// copied into each use, and the shared weight's gradient is the sum of those uses' gradients.
TEST(AttentionOracleTest, SharedProjectionsAreOneTensorWithSummedGradients) {
  struct Case {
    const char* text;
    const char* shared;                 // the shared projection's name
    std::vector<const char*> mha_uses;  // the MHA projections it stands for
  };
  const Case cases[] = {
      {"qk-v", "qk_proj", {"q_proj", "k_proj"}},
      {"q-kv", "kv_proj", {"k_proj", "v_proj"}},
      {"qkv1", "qkv_proj", {"q_proj", "k_proj", "v_proj"}},
  };
  for (PosScheme pos : {PosScheme::kLearned, PosScheme::kRope}) {
    const ModelShape shape = small_shape(pos);
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(c.text) + " " + std::string(pos_scheme_name(pos)));
      torch::manual_seed(9);
      auto shared = make_attention(spec_of(c.text, shape), kF64);
      auto mha = make_attention(spec_of("mha", shape), kF64);
      copy_same_names(*mha, *shared);
      const auto sp = shared->named_parameters();
      auto mp = mha->named_parameters();
      for (const char* use : c.mha_uses) {
        copy_into(mp[std::string(use) + ".weight"], sp[std::string(c.shared) + ".weight"]);
        copy_into(mp[std::string(use) + ".bias"], sp[std::string(c.shared) + ".bias"]);
      }
      // one weight tensor per distinct projection, none duplicated
      int64_t weights = 0;
      for (const auto& item : sp) weights += item.key().find(".weight") != std::string::npos;
      EXPECT_EQ(weights, 4 - static_cast<int64_t>(c.mha_uses.size()) + 1);

      const torch::Tensor x = torch::randn({2, 6, 16}, kF64);
      const torch::Tensor probe = torch::randn({2, 6, 16}, kF64);
      const torch::Tensor y_shared = shared->forward(x), y_mha = mha->forward(x);
      EXPECT_LT(max_abs_diff(y_shared, y_mha), 1e-12);
      (y_shared * probe).sum().backward();
      (y_mha * probe).sum().backward();
      torch::Tensor summed = torch::zeros_like(sp[std::string(c.shared) + ".weight"]);
      for (const char* use : c.mha_uses) summed += mp[std::string(use) + ".weight"].grad();
      EXPECT_LT(max_abs_diff(sp[std::string(c.shared) + ".weight"].grad(), summed), 1e-10);
    }
  }
}

// GVA with d_n = d_h, M_h = I and no decoupled slice rebuilds k_h = RoPE(v_g(h)): that is
// Q-GQA with RoPE on the shared K=V stream, on the same weights.
TEST(AttentionOracleTest, GvaWithIdentityMapsIsQGqa) {
  torch::manual_seed(10);
  const ModelShape shape = small_shape(PosScheme::kRope);
  for (int64_t groups : {1, 2, 4}) {
    const std::string g = std::to_string(groups);
    auto gva = std::dynamic_pointer_cast<GvaAttentionImpl>(
        make_attention(spec_of("gva:" + g + ",dr=0", shape), kF64));
    auto q_gqa = std::dynamic_pointer_cast<StandardAttentionImpl>(
        make_attention(spec_of("q-gqa:" + g, shape), kF64));
    copy_into(gva->q_proj->weight, q_gqa->q_proj->weight);
    copy_into(gva->q_proj->bias, q_gqa->q_proj->bias);
    copy_into(gva->v_proj->weight, q_gqa->kv_proj->weight);
    copy_into(gva->v_proj->bias, q_gqa->kv_proj->bias);
    copy_into(gva->o_proj->weight, q_gqa->o_proj->weight);
    copy_into(gva->o_proj->bias, q_gqa->o_proj->bias);
    copy_into(gva->key_maps, torch::eye(4, kF64).expand({4, 4, 4}));
    const torch::Tensor x = torch::randn({2, 9, 16}, kF64);
    EXPECT_LT(max_abs_diff(gva->forward(x), q_gqa->forward(x)), 1e-12) << "G=" << groups;
  }
}

TEST(AttentionOracleTest, AbsorbedScoresEqualExplicitScores) {
  torch::manual_seed(11);
  const ModelShape rope = small_shape(PosScheme::kRope);
  const ModelShape learned = small_shape(PosScheme::kLearned);  // biases everywhere
  const ModelShape no_bias = small_shape(PosScheme::kRope, ModelKind::kDecoder, BiasKind::kNone);
  for (const auto& [text, shape] : std::vector<std::pair<std::string, ModelShape>>{
           {"mla", rope}, {"mla:dc=12,dr=4,dn=6,dv=2,dq=10", learned}, {"mla", no_bias}}) {
    SCOPED_TRACE(text);
    auto mla =
        std::dynamic_pointer_cast<MlaAttentionImpl>(make_attention(spec_of(text, shape), kF64));
    const torch::Tensor x = torch::randn({2, 7, 16}, kF64);
    EXPECT_LT(max_abs_diff(mla->scores(x, true), mla->scores(x, false)), 1e-12);
  }
  for (const auto& [text, shape] : std::vector<std::pair<std::string, ModelShape>>{
           {"gva:2,dr=4", rope},
           {"gva:1,dr=2,qnorm,init=variance-fixed", learned},
           {"gva:4,dr=4,dn=6", no_bias}}) {
    SCOPED_TRACE(text);
    auto gva =
        std::dynamic_pointer_cast<GvaAttentionImpl>(make_attention(spec_of(text, shape), kF64));
    const torch::Tensor x = torch::randn({2, 7, 16}, kF64);
    EXPECT_LT(max_abs_diff(gva->scores(x, true), gva->scores(x, false)), 1e-12);
  }
}

TEST(AttentionOracleTest, GvaKeyMapInitialisations) {
  torch::manual_seed(12);
  ModelShape wide = small_shape(PosScheme::kRope);
  wide.n_heads = 8;
  wide.head_dim = 64;
  wide.d_model = 64;
  auto make = [&](const char* text) {
    return std::dynamic_pointer_cast<GvaAttentionImpl>(make_attention(spec_of(text, wide), kF64));
  };
  // baseline: U(±1/sqrt(d_h)), std 1/sqrt(3·d_h); scale-matched: N(0, 1/d_h)
  EXPECT_NEAR(make("gva:2,dr=16")->key_maps.std().item<double>(), 1.0 / std::sqrt(3.0 * 64), 2e-3);
  EXPECT_NEAR(make("gva:2,dr=16,init=scale-matched")->key_maps.std().item<double>(), 1.0 / 8, 3e-3);
  // variance-fixed: orthogonal, M_hᵀ M_h = I for square maps (torch's orthogonal_ runs its
  // QR in single precision, hence the tolerance)
  const torch::Tensor m = make("gva:2,dr=16,init=variance-fixed")->key_maps;
  const torch::Tensor gram = torch::matmul(m.transpose(1, 2), m);
  EXPECT_LT(max_abs_diff(gram, torch::eye(64, kF64).expand({8, 64, 64})), 1e-5);
}

// Gradients of every module against central finite differences, in f64.
TEST(AttentionGradientTest, EveryVariantMatchesFiniteDifferences) {
  torch::manual_seed(13);
  std::mt19937 rng(13);
  for (const VariantCase& c : every_variant()) {
    SCOPED_TRACE(case_name(c));
    const auto module = make_attention(spec_of(c.text, c.shape), kF64);
    const torch::Tensor x = torch::randn({2, 5, 16}, kF64);
    const torch::Tensor probe = torch::randn({2, 5, 16}, kF64);
    auto loss = [&] { return (module->forward(x) * probe).sum(); };
    module->zero_grad();
    loss().backward();
    for (const auto& item : module->named_parameters()) {
      torch::Tensor p = item.value();
      const torch::Tensor grad = p.grad();
      ASSERT_TRUE(grad.defined()) << item.key();
      torch::Tensor flat = p.view({-1});
      for (int trial = 0; trial < 3; ++trial) {
        const int64_t i = std::uniform_int_distribution<int64_t>(0, p.numel() - 1)(rng);
        const double eps = 1e-6;
        const double saved = flat[i].item<double>();
        torch::NoGradGuard no_grad;
        flat[i] = saved + eps;
        const double up = loss().item<double>();
        flat[i] = saved - eps;
        const double down = loss().item<double>();
        flat[i] = saved;
        const double numeric = (up - down) / (2 * eps);
        const double analytic = grad.view({-1})[i].item<double>();
        EXPECT_NEAR(analytic, numeric, 1e-6 * std::max(1.0, std::abs(numeric)))
            << item.key() << "[" << i << "]";
      }
    }
  }
}

}  // namespace
}  // namespace kvlab::nn
