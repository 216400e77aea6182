// gta (grouped-tied attention) against two oracles: GVA with M_h set to the channel selection
// it is defined as, and the paper's formula computed here with plain loops.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "nn/attention.h"
#include "nn/gva_attention.h"
#include "nn/nn_test_util.h"

namespace kvlab::nn {
namespace {

using testing::affine;
using testing::copy_into;
using testing::kF64;
using testing::max_abs_diff;
using testing::rotate_halves;
using testing::small_shape;
using testing::spec_of;

std::shared_ptr<GvaAttentionImpl> build(const std::string& text, const ModelShape& shape) {
  return std::dynamic_pointer_cast<GvaAttentionImpl>(make_attention(spec_of(text, shape), kF64));
}

TEST(GtaTest, EqualsGvaWithTheChannelSelectionAsItsKeyMaps) {
  torch::manual_seed(41);
  for (PosScheme pos : {PosScheme::kRope, PosScheme::kLearned}) {
    const ModelShape shape = small_shape(pos);  // H 4, d_h 4
    for (const auto& [gta_text, gva_text] :
         std::vector<std::pair<std::string, std::string>>{{"gta:2", "gva:2,dr=2,dn=2"},
                                                          {"gta:4,dr=2", "gva:4,dr=2,dn=2"},
                                                          {"gta:1", "gva:1,dr=2,dn=2"}}) {
      SCOPED_TRACE(gta_text);
      auto gta = build(gta_text, shape);
      auto gva = build(gva_text, shape);
      ASSERT_FALSE(gta->key_maps.defined()) << "gta's M_h is fixed, not a parameter";
      copy_into(gva->q_proj->weight, gta->q_proj->weight);
      copy_into(gva->q_proj->bias, gta->q_proj->bias);
      copy_into(gva->v_proj->weight, gta->v_proj->weight);
      copy_into(gva->v_proj->bias, gta->v_proj->bias);
      copy_into(gva->r_proj->weight, gta->r_proj->weight);
      copy_into(gva->r_proj->bias, gta->r_proj->bias);
      copy_into(gva->o_proj->weight, gta->o_proj->weight);
      copy_into(gva->o_proj->bias, gta->o_proj->bias);
      const int64_t H = 4, d = 4, dn = 2;
      torch::Tensor selection = torch::zeros({H, d, dn}, kF64);  // M_h: [d_h, d_n]
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t i = 0; i < dn; ++i) selection[h][i][i] = 1.0;
      }
      copy_into(gva->key_maps, selection);
      const torch::Tensor x = torch::randn({2, 9, 16}, kF64);
      EXPECT_LT(max_abs_diff(gta->forward(x, 3), gva->forward(x, 3)), 1e-12);
      const auto q_gta = gta->decode_query(x, 3), q_gva = gva->decode_query(x, 3);
      EXPECT_LT(max_abs_diff(q_gta.q, q_gva.q), 1e-12) << "absorbed query";
      EXPECT_LT(max_abs_diff(q_gta.q_rope, q_gva.q_rope), 1e-12);
      EXPECT_EQ(q_gta.scale, q_gva.scale);
    }
  }
}

// Head h (group g = h / (H/G)) scores token j by q_h^nope · s_{g,j}[0:d_n] + q_h^rope · r_j with
// s the tied state and r the shared rotated key, over sqrt(d_h); its value is the whole s_{g,j}.
TEST(GtaTest, MatchesThePapersFormulaComputedHere) {
  torch::manual_seed(42);
  const ModelShape shape = small_shape(PosScheme::kRope);
  const int64_t H = 4, G = 2, d = 4, dr = 2, dn = 2, D = 16, T = 6, start = 2;
  auto gta = build("gta:2", shape);
  const torch::Tensor x = torch::randn({1, T, D}, kF64);
  const torch::Tensor expected = gta->forward(x, start);  // [1, T, D]
  const double theta = shape.rope_theta;
  std::vector<std::vector<double>> q(T), state(T), rope(T);
  for (int64_t t = 0; t < T; ++t) {
    const double* xt = x[0][t].contiguous().data_ptr<double>();
    q[t] = affine(gta->q_proj->weight, gta->q_proj->bias, xt);      // [H·(d_n + d_r)]
    state[t] = affine(gta->v_proj->weight, gta->v_proj->bias, xt);  // [G·d_h]
    rope[t] = rotate_halves(affine(gta->r_proj->weight, gta->r_proj->bias, xt), start + t, theta);
  }
  for (int64_t i = 0; i < T; ++i) {
    std::vector<double> attended(static_cast<size_t>(H * d), 0.0);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / G);
      const double* qh = q[i].data() + h * (dn + dr);
      const std::vector<double> q_rope = rotate_halves({qh + dn, qh + dn + dr}, start + i, theta);
      std::vector<double> scores;
      double top = -1e300;
      for (int64_t j = 0; j <= i; ++j) {
        double s = 0;
        for (int64_t c = 0; c < dn; ++c) s += qh[c] * state[j][g * d + c];
        for (int64_t c = 0; c < dr; ++c) s += q_rope[c] * rope[j][c];
        scores.push_back(s / std::sqrt(static_cast<double>(d)));
        top = std::max(top, scores.back());
      }
      double total = 0;
      for (double& s : scores) total += (s = std::exp(s - top));
      for (int64_t j = 0; j <= i; ++j) {
        for (int64_t c = 0; c < d; ++c) {
          attended[h * d + c] += scores[j] / total * state[j][g * d + c];
        }
      }
    }
    const std::vector<double> y = affine(gta->o_proj->weight, gta->o_proj->bias, attended.data());
    for (int64_t c = 0; c < D; ++c) {
      EXPECT_NEAR(expected[0][i][c].item<double>(), y[c], 1e-12)
          << "token " << i << " channel " << c;
    }
  }
}

}  // namespace
}  // namespace kvlab::nn
