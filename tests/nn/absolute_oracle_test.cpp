// Absolute oracles: results checked against numbers computed here without the library's code
// (hand-evaluated literals, or softmax(QKᵀ/√d)·V written out as loops), beside the relative
// oracles (cached == full forward, absorbed == explicit) the other tests use.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "nn/attention.h"
#include "nn/layers.h"
#include "nn/nn_test_util.h"
#include "nn/standard_attention.h"

namespace kvlab::nn {
namespace {

using testing::affine;
using testing::kF64;
using testing::small_shape;
using testing::spec_of;

// RoPE, halves form, θ = 10000, d = 4: frequencies 1 and 10000^(-1/2) = 0.01. Values of
// x = [1, 2, 3, 4] rotated to positions 0, 1 and 5, evaluated by hand (cos 1, sin 1, ...).
TEST(AbsoluteOracleTest, RopeAtHandComputedPositions) {
  const torch::Tensor x = torch::tensor({1.0, 2.0, 3.0, 4.0}, kF64).view({1, 1, 1, 4});
  const double expected[3][4] = {
      {1.0, 2.0, 3.0, 4.0},
      {-1.984110648555550, 1.959900667496664, 2.462377902412316, 4.019799668334994},
      {3.160435009452641, 1.797583843707219, -0.107937718273460, 4.094959380121222},
  };
  const int64_t positions[3] = {0, 1, 5};
  for (int i = 0; i < 3; ++i) {
    const torch::Tensor y = apply_rope(x, positions[i], 10000.0, RopeScaling{}).flatten();
    for (int c = 0; c < 4; ++c) {
      EXPECT_NEAR(y[c].item<double>(), expected[i][c], 1e-14) << "position " << positions[i];
    }
  }
}

// MHA (learned positions: no rotation) and GQA with 2 groups: softmax(q·k/√d_h) over the
// causal past, weighted sum of v, output projection — loops over tokens, heads and channels.
TEST(AbsoluteOracleTest, MhaAndGqaEqualTheFormulaWrittenOut) {
  torch::manual_seed(45);
  const ModelShape shape = small_shape(PosScheme::kLearned);  // D 16, H 4, d_h 4
  for (const char* text : {"mha", "gqa:2", "mqa"}) {
    SCOPED_TRACE(text);
    auto attn = std::dynamic_pointer_cast<StandardAttentionImpl>(
        make_attention(spec_of(text, shape), kF64));
    const int64_t T = 5, D = 16, H = 4, d = 4, G = attn->spec().n_groups;
    const torch::Tensor x = torch::randn({1, T, D}, kF64);
    const torch::Tensor expected = attn->forward(x);
    std::vector<std::vector<double>> q(T), k(T), v(T);
    for (int64_t t = 0; t < T; ++t) {
      const double* xt = x[0][t].contiguous().data_ptr<double>();
      q[t] = affine(attn->q_proj->weight, attn->q_proj->bias, xt);  // [H·d]
      k[t] = affine(attn->k_proj->weight, attn->k_proj->bias, xt);  // [G·d]
      v[t] = affine(attn->v_proj->weight, attn->v_proj->bias, xt);
    }
    for (int64_t i = 0; i < T; ++i) {
      std::vector<double> attended(static_cast<size_t>(H * d), 0.0);
      for (int64_t h = 0; h < H; ++h) {
        const int64_t g = h / (H / G);
        std::vector<double> p;
        double top = -1e300, total = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double s = 0;
          for (int64_t c = 0; c < d; ++c) s += q[i][h * d + c] * k[j][g * d + c];
          p.push_back(s / std::sqrt(static_cast<double>(d)));
          top = std::max(top, p.back());
        }
        for (double& s : p) total += (s = std::exp(s - top));
        for (int64_t j = 0; j <= i; ++j) {
          for (int64_t c = 0; c < d; ++c) attended[h * d + c] += p[j] / total * v[j][g * d + c];
        }
      }
      const std::vector<double> y =
          affine(attn->o_proj->weight, attn->o_proj->bias, attended.data());
      for (int64_t c = 0; c < D; ++c) {
        EXPECT_NEAR(expected[0][i][c].item<double>(), y[c], 1e-12) << "token " << i;
      }
    }
  }
}

}  // namespace
}  // namespace kvlab::nn
