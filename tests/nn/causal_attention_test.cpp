// The fused causal attention (kernels/causal_attention behind an autograd function) against its
// reference twin, libtorch's composed ops: outputs and the gradients of q, k and v, f64 and f32,
// odd shapes, every grouping; and whole attention layers with the fused path on and off.
#include "nn/causal_attention.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "nn/attention.h"
#include "nn/nn_test_util.h"

namespace kvlab::nn {
namespace {

using testing::max_abs_diff;
using testing::small_shape;
using testing::spec_of;

struct Shape {
  int64_t batch, tokens, heads, groups, key_dim, value_dim;
};

const std::vector<Shape> kShapes = {
    {1, 1, 1, 1, 4, 4},  {2, 7, 6, 2, 12, 10},  {3, 33, 4, 4, 8, 8},
    {2, 17, 5, 1, 6, 9}, {1, 64, 8, 2, 32, 32}, {2, 130, 3, 3, 5, 7},
};

struct Result {
  torch::Tensor out, dq, dk, dv;
};

Result run(bool fused, const torch::Tensor& q0, const torch::Tensor& k0, const torch::Tensor& v0,
           const torch::Tensor& upstream, double scale) {
  const torch::Tensor q = q0.detach().clone().requires_grad_(true);
  const torch::Tensor k = k0.detach().clone().requires_grad_(true);
  const torch::Tensor v = v0.detach().clone().requires_grad_(true);
  const torch::Tensor out =
      fused ? fused_causal_attention(q, k, v, scale) : composed_causal_attention(q, k, v, scale);
  (out * upstream).sum().backward();
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

void expect_close(const Result& fused, const Result& reference, double tolerance) {
  for (const auto& [name, a, b] :
       std::vector<std::tuple<std::string, torch::Tensor, torch::Tensor>>{
           {"out", fused.out, reference.out},
           {"dq", fused.dq, reference.dq},
           {"dk", fused.dk, reference.dk},
           {"dv", fused.dv, reference.dv}}) {
    ASSERT_TRUE(a.defined()) << name;
    EXPECT_EQ(a.sizes(), b.sizes()) << name;
    EXPECT_TRUE(torch::isfinite(a).all().item<bool>()) << name;
    // relative to the reference's largest element, so the bound means the same at every size
    const double size = std::max(1.0, b.abs().max().item<double>());
    EXPECT_LT(max_abs_diff(a, b) / size, tolerance) << name;
  }
}

TEST(FusedCausalAttentionTest, EqualsTheComposedOpsWithGradients) {
  for (const auto dtype : {torch::kFloat64, torch::kFloat32}) {
    const double tolerance = dtype == torch::kFloat64 ? 1e-12 : 2e-5;
    for (size_t i = 0; i < kShapes.size(); ++i) {
      const Shape& s = kShapes[i];
      SCOPED_TRACE(std::string(dtype == torch::kFloat64 ? "f64" : "f32") + " shape #" +
                   std::to_string(i));
      torch::manual_seed(static_cast<uint64_t>(100 + i));
      const auto opts = torch::TensorOptions().dtype(dtype);
      // large enough scores that the softmax is peaked in places
      const torch::Tensor q = 2 * torch::randn({s.batch, s.tokens, s.heads, s.key_dim}, opts);
      const torch::Tensor k = 2 * torch::randn({s.batch, s.tokens, s.groups, s.key_dim}, opts);
      const torch::Tensor v = torch::randn({s.batch, s.tokens, s.groups, s.value_dim}, opts);
      const torch::Tensor up = torch::randn({s.batch, s.tokens, s.heads, s.value_dim}, opts);
      const double scale = 1.0 / std::sqrt(static_cast<double>(s.key_dim));
      expect_close(run(true, q, k, v, up, scale), run(false, q, k, v, up, scale), tolerance);
      // score gaps beyond 87 (where the f32 exp flushes to 0) and nearly one-hot rows
      expect_close(run(true, 12 * q, k, v, up, scale), run(false, 12 * q, k, v, up, scale),
                   tolerance);
    }
  }
}

TEST(FusedCausalAttentionTest, QueryNeverSeesLaterKeys) {
  torch::manual_seed(7);
  const torch::Tensor q = torch::randn({1, 9, 2, 4}, testing::kF64);
  const torch::Tensor k = torch::randn({1, 9, 2, 4}, testing::kF64);
  const torch::Tensor v = torch::randn({1, 9, 2, 4}, testing::kF64);
  const torch::Tensor out = fused_causal_attention(q, k, v, 0.5);
  torch::Tensor k2 = k.clone(), v2 = v.clone();
  k2.narrow(1, 5, 4).normal_();
  v2.narrow(1, 5, 4).normal_();
  const torch::Tensor changed = fused_causal_attention(q, k2, v2, 0.5);
  EXPECT_LT(max_abs_diff(out.narrow(1, 0, 5), changed.narrow(1, 0, 5)), 1e-15);
  EXPECT_GT(max_abs_diff(out.narrow(1, 5, 4), changed.narrow(1, 5, 4)), 1e-3);
}

TEST(FusedCausalAttentionTest, RefusesWhatItCannotCompute) {
  const torch::Tensor q = torch::randn({1, 4, 2, 4});
  EXPECT_THROW(fused_causal_attention(q.to(torch::kBFloat16), q.to(torch::kBFloat16),
                                      q.to(torch::kBFloat16), 1.0),
               std::invalid_argument);
  EXPECT_THROW(
      fused_causal_attention(q, torch::randn({1, 4, 3, 4}), torch::randn({1, 4, 3, 4}), 1.0),
      std::invalid_argument);  // 2 heads over 3 groups
  EXPECT_THROW(
      fused_causal_attention(q, torch::randn({1, 5, 2, 4}), torch::randn({1, 5, 2, 4}), 1.0),
      std::invalid_argument);  // keys at other positions than the queries
}

// A prompt chunk after cached keys (prefill): queries at the last T of Tk positions, forward only,
// against the composed ops with the same offset mask; offsets within and across a query block.
TEST(FusedCausalAttentionTest, QueriesAfterCachedKeysMatchTheComposedOps) {
  torch::NoGradGuard no_grad;
  for (const auto dtype : {torch::kFloat64, torch::kFloat32}) {
    for (const auto& [offset, tokens] : std::vector<std::pair<int64_t, int64_t>>{
             {0, 1}, {0, 70}, {1, 1}, {5, 3}, {7, 66}, {70, 5}, {64, 64}, {3, 130}}) {
      SCOPED_TRACE(std::to_string(offset) + " + " + std::to_string(tokens) +
                   (dtype == torch::kFloat32 ? " f32" : " f64"));
      torch::manual_seed(offset * 1000 + tokens);
      const auto options = torch::TensorOptions().dtype(dtype);
      const torch::Tensor q = torch::randn({2, tokens, 6, 5}, options);
      const torch::Tensor k = torch::randn({2, offset + tokens, 2, 5}, options);
      const torch::Tensor v = torch::randn({2, offset + tokens, 2, 7}, options);
      const torch::Tensor fused = fused_causal_attention_after(q, k, v, 0.4);
      const torch::Tensor composed = composed_causal_attention(q, k, v, 0.4);
      EXPECT_TRUE(torch::isfinite(fused).all().item<bool>());
      EXPECT_LT(max_abs_diff(fused, composed), dtype == torch::kFloat64 ? 1e-12 : 2e-6);
      // the last query sees every key: changing the first value changes it
      const torch::Tensor v2 = v.clone();
      v2.select(1, 0).add_(1.0);
      EXPECT_GT(max_abs_diff(fused_causal_attention_after(q, k, v2, 0.4).select(1, tokens - 1),
                             fused.select(1, tokens - 1)),
                1e-6);
    }
  }
}

TEST(FusedCausalAttentionTest, QueriesAfterCachedKeysTakeNoGradient) {
  const torch::Tensor q = torch::randn({1, 2, 2, 4}).requires_grad_(true);
  const torch::Tensor k = torch::randn({1, 5, 2, 4});
  EXPECT_THROW(fused_causal_attention_after(q, k, k, 1.0), std::invalid_argument);
  EXPECT_THROW(fused_causal_attention(q, k, k, 1.0), std::invalid_argument);  // offsets: no grad
}

// A module's output and every parameter's gradient of sum(y²), fused against composed, to
// 1e-11 in f64 (a parameter the output does not reach compares as zeros).
template <class Forward>
void expect_fused_equals_composed(nn::AttentionImpl& module, const Forward& forward) {
  const auto grads = [&](bool fused) {
    module.use_fused_attention(fused);
    module.zero_grad();
    const torch::Tensor y = forward();
    (y * y).sum().backward();
    std::vector<torch::Tensor> all = {y.detach()};
    for (const auto& p : module.parameters()) {
      all.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
    }
    return all;
  };
  const std::vector<torch::Tensor> fused = grads(true), composed = grads(false);
  ASSERT_EQ(fused.size(), composed.size());
  EXPECT_GT(fused[0].abs().max().item<double>(), 1e-3);  // not a vacuous comparison
  for (size_t i = 0; i < fused.size(); ++i) {
    EXPECT_LT(max_abs_diff(fused[i], composed[i]), 1e-11) << "tensor #" << i;
  }
}

// Whole layers: every causal softmax variant of the standard family, output and every
// parameter's gradient, fused against composed.
TEST(FusedCausalAttentionTest, LayersComputeTheSameWithTheFusedPathOnAndOff) {
  const ModelShape rope = small_shape(PosScheme::kRope);
  const ModelShape learned = small_shape(PosScheme::kLearned);
  for (const std::string text :
       {"mha", "gqa:2", "mqa", "qk-v", "q-kv", "q-kv:knorm", "qkv1", "q-gqa:2", "q-mqa"}) {
    for (const ModelShape& shape : {rope, learned}) {
      if (text.find("knorm") != std::string::npos && shape.pos != PosScheme::kRope) continue;
      SCOPED_TRACE(text + (shape.pos == PosScheme::kRope ? " rope" : " learned"));
      torch::manual_seed(3);
      const auto module = make_attention(spec_of(text, shape), testing::kF64);
      const torch::Tensor x = torch::randn({2, 13, shape.d_model}, testing::kF64);
      expect_fused_equals_composed(*module, [&] { return module->forward(x); });
    }
  }
}

// The other softmax families: the full forward (training) and the first prompt's prefill from
// the cache rows, output and every parameter's gradient, fused against composed. gva and gta with
// a rope key and mla's and gla's prefills run the absorbed form, the rest the explicit one.
TEST(FusedCausalAttentionTest, EveryFamilyComputesTheSameWithTheFusedPathOnAndOff) {
  for (const BiasKind bias : {BiasKind::kAll, BiasKind::kNone}) {
    const ModelShape shape = small_shape(PosScheme::kRope, ModelKind::kDecoder, bias);
    for (const std::string text : {"gva:2,dr=2", "gva:2,dr=0", "gva:2,dr=2,qnorm", "gta:2,dr=2",
                                   "mla:dc=8,dr=2", "mla:dc=8,dr=2,dq=6", "gla:hc=2,dc=8,dr=2"}) {
      for (const bool prefill : {false, true}) {
        SCOPED_TRACE(text + (prefill ? " prefill" : " forward") +
                     (bias == BiasKind::kAll ? " bias" : ""));
        torch::manual_seed(4);
        const auto module = make_attention(spec_of(text, shape), testing::kF64);
        const torch::Tensor x = torch::randn({2, 13, shape.d_model}, testing::kF64);
        expect_fused_equals_composed(*module, [&] {
          return prefill ? module->forward_from_cache(x, module->cache_rows(x, 0), 0)
                         : module->forward(x);
        });
      }
    }
  }
}

// A later prompt chunk (queries after cached rows, no gradient) of every softmax family, fused
// against composed: the standard family's cached keys and values, gva's and gta's values (and
// rope key), mla's and gla's latents.
TEST(FusedCausalAttentionTest, EveryFamilysLaterPromptChunkIsTheSameFusedOrComposed) {
  torch::NoGradGuard no_grad;
  const ModelShape shape = small_shape(PosScheme::kRope);
  for (const std::string text : {"gqa:2", "mha", "q-kv:knorm", "gva:2,dr=2", "gva:2,dr=0",
                                 "gta:2,dr=2", "mla:dc=8,dr=2", "gla:hc=2,dc=8,dr=2"}) {
    for (const int64_t start : {1, 6, 12}) {
      SCOPED_TRACE(text + " after " + std::to_string(start));
      torch::manual_seed(5);
      const auto module = make_attention(spec_of(text, shape), testing::kF64);
      const torch::Tensor x = torch::randn({2, 13, shape.d_model}, testing::kF64);
      const std::vector<torch::Tensor> rows = module->cache_rows(x, 0);
      const torch::Tensor chunk = x.narrow(1, start, 13 - start);
      module->use_fused_attention(true);
      const torch::Tensor fused = module->forward_from_cache(chunk, rows, start);
      module->use_fused_attention(false);
      const torch::Tensor composed = module->forward_from_cache(chunk, rows, start);
      EXPECT_GT(composed.abs().max().item<double>(), 1e-3);
      EXPECT_LT(max_abs_diff(fused, composed), 1e-11);
      // and the chunk's rows equal the whole sequence's forward there
      EXPECT_LT(max_abs_diff(fused, module->forward(x).narrow(1, start, 13 - start)), 1e-10);
    }
  }
}

}  // namespace
}  // namespace kvlab::nn
