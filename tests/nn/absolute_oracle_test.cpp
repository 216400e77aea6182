// Absolute oracles: results checked against numbers computed here without the library's code
// (hand-evaluated literals, or softmax(QKᵀ/√d)·V written out as loops), beside the relative
// oracles (cached == full forward, absorbed == explicit) the other tests use.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "nn/attention.h"
#include "nn/gva_attention.h"
#include "nn/layers.h"
#include "nn/mla_attention.h"
#include "nn/nn_test_util.h"
#include "nn/standard_attention.h"

namespace kvlab::nn {
namespace {

using testing::affine;
using testing::kF64;
using testing::rotate_halves;
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

// Helpers of the written-out formulas below: plain loops over std::vector<double>.
using Row = std::vector<double>;

Row slice(const Row& v, int64_t from, int64_t n) {
  return Row(v.begin() + from, v.begin() + from + n);
}

double dot(const Row& a, const Row& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += a[i] * b[i];
  return sum;
}

// LayerNorm ((x − mean) / sqrt(var + eps) · w + b) or RMSNorm (x / sqrt(mean x² + eps) · w)
Row normalize(const Row& x, const Norm& norm) {
  const double n = static_cast<double>(x.size());
  double mean = 0, square = 0;
  for (double v : x) mean += v / n;
  const bool layer = norm->kind == NormKind::kLayerNorm;
  for (double v : x) square += (layer ? (v - mean) * (v - mean) : v * v) / n;
  Row y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double centred = layer ? x[i] - mean : x[i];
    y[i] = centred / std::sqrt(square + norm->eps) *
               norm->weight[static_cast<int64_t>(i)].item<double>() +
           (layer ? norm->bias[static_cast<int64_t>(i)].item<double>() : 0.0);
  }
  return y;
}

// softmax over the scores of one query
Row softmax(Row scores) {
  double top = -1e300, total = 0;
  for (double s : scores) top = std::max(top, s);
  for (double& s : scores) total += (s = std::exp(s - top));
  for (double& s : scores) s /= total;
  return scores;
}

// Every token of a prompt, and its last token alone, against the expected rows.
void expect_rows_equal(const torch::Tensor& all, const torch::Tensor& last,
                       const std::vector<Row>& expected) {
  const int64_t T = static_cast<int64_t>(expected.size());
  for (int64_t i = 0; i < T; ++i) {
    for (int64_t c = 0; c < all.size(-1); ++c) {
      EXPECT_NEAR(all[0][i][c].item<double>(), expected[i][c], 1e-12) << "token " << i;
    }
  }
  for (int64_t c = 0; c < last.size(-1); ++c) {
    EXPECT_NEAR(last[0][0][c].item<double>(), expected[T - 1][c], 1e-12) << "last token alone";
  }
}

// The absorbed forms the decode runs (forward_from_cache over the cached rows: q̃_h = q_h^nope
// M_hᵀ against grouped value rows for gva; q̃_h = W_uk,hᵀ q_h^nope against latent rows and W_uv
// after the weighted sum for mla), for every token of a prompt and for its last token alone,
// against the explicit formulas of DESIGN.md written out: each head's key rebuilt, scores
// (q^nope·k^nope + q^rope·k^rope) / sqrt(d_n + d_r), softmax over the causal past, the weighted
// sum of values, the output projection.
TEST(AbsoluteOracleTest, AbsorbedGvaDecodeEqualsTheFormulaWrittenOut) {
  torch::manual_seed(46);
  const ModelShape shape = small_shape(PosScheme::kRope);  // D 16, H 4, d_h 4
  for (const char* text : {"gva:2,dr=2", "gva:1,dr=2", "gva:4,dr=2"}) {
    SCOPED_TRACE(text);
    auto attn =
        std::dynamic_pointer_cast<GvaAttentionImpl>(make_attention(spec_of(text, shape), kF64));
    const AttentionSpec& s = attn->spec();
    const int64_t T = 6, H = s.n_heads, G = s.n_groups, dh = s.head_dim;
    const int64_t dn = s.nope_dim, dr = s.rope_dim;
    ASSERT_GT(dr, 0);
    const torch::Tensor x = torch::randn({1, T, s.d_model}, kF64);
    const std::vector<torch::Tensor> rows = attn->cache_rows(x, 0);
    const torch::Tensor all = attn->forward_from_cache(x, rows, 0);
    const torch::Tensor last = attn->forward_from_cache(x.narrow(1, T - 1, 1), rows, T - 1);
    std::vector<Row> q(T), v(T), k_rope(T), expected(T);
    for (int64_t t = 0; t < T; ++t) {
      const double* xt = x[0][t].contiguous().data_ptr<double>();
      q[t] = affine(attn->q_proj->weight, attn->q_proj->bias, xt);  // [H·(d_n + d_r)]
      v[t] = affine(attn->v_proj->weight, attn->v_proj->bias, xt);  // [G·d_h]
      k_rope[t] =
          rotate_halves(affine(attn->r_proj->weight, attn->r_proj->bias, xt), t, s.rope_theta);
    }
    for (int64_t i = 0; i < T; ++i) {
      Row attended(static_cast<size_t>(H * dh), 0.0);
      for (int64_t h = 0; h < H; ++h) {
        const int64_t g = h / (H / G);
        const Row q_nope = slice(q[i], h * (dn + dr), dn);
        const Row q_rope = rotate_halves(slice(q[i], h * (dn + dr) + dn, dr), i, s.rope_theta);
        Row scores;
        for (int64_t j = 0; j <= i; ++j) {
          Row k_nope(static_cast<size_t>(dn), 0.0);  // k_h^nope = v_g(h) M_h
          for (int64_t n = 0; n < dn; ++n) {
            for (int64_t d = 0; d < dh; ++d) {
              k_nope[n] += v[j][g * dh + d] * attn->key_maps[h][d][n].item<double>();
            }
          }
          scores.push_back((dot(q_nope, k_nope) + dot(q_rope, k_rope[j])) /
                           std::sqrt(static_cast<double>(dn + dr)));
        }
        const Row p = softmax(scores);
        for (int64_t j = 0; j <= i; ++j) {
          for (int64_t c = 0; c < dh; ++c) attended[h * dh + c] += p[j] * v[j][g * dh + c];
        }
      }
      expected[i] = affine(attn->o_proj->weight, attn->o_proj->bias, attended.data());
    }
    expect_rows_equal(all, last, expected);
  }
}

TEST(AbsoluteOracleTest, AbsorbedMlaDecodeEqualsTheFormulaWrittenOut) {
  torch::manual_seed(47);
  const ModelShape shape = small_shape(PosScheme::kRope);  // D 16, H 4, d_h 4, LayerNorm
  for (const char* text : {"mla:dc=6,dr=2", "mla:dc=6,dr=2,dq=5"}) {
    SCOPED_TRACE(text);
    auto attn =
        std::dynamic_pointer_cast<MlaAttentionImpl>(make_attention(spec_of(text, shape), kF64));
    const AttentionSpec& s = attn->spec();
    const int64_t T = 6, H = s.n_heads, dc = s.latent_dim;
    const int64_t dn = s.nope_dim, dr = s.rope_dim, dv = s.value_dim;
    {  // norms that are not the identity, so leaving one out shows
      torch::NoGradGuard no_grad;
      for (Norm norm : {attn->kv_a_layernorm, attn->q_a_layernorm}) {
        if (!norm) continue;
        norm->weight.uniform_(0.5, 1.5);
        if (norm->bias.defined()) norm->bias.normal_(0.0, 0.3);
      }
    }
    const torch::Tensor x = torch::randn({1, T, s.d_model}, kF64);
    const std::vector<torch::Tensor> rows = attn->cache_rows(x, 0);
    const torch::Tensor all = attn->forward_from_cache(x, rows, 0);
    const torch::Tensor last = attn->forward_from_cache(x.narrow(1, T - 1, 1), rows, T - 1);
    std::vector<Row> q(T), kv(T), k_rope(T), expected(T);
    for (int64_t t = 0; t < T; ++t) {
      const double* xt = x[0][t].contiguous().data_ptr<double>();
      if (attn->q_proj) {
        q[t] = affine(attn->q_proj->weight, attn->q_proj->bias, xt);  // [H·(d_n + d_r)]
      } else {                                                        // low-rank: W_qb Norm(W_qa x)
        const Row q_latent = normalize(affine(attn->q_a_proj->weight, attn->q_a_proj->bias, xt),
                                       attn->q_a_layernorm);
        q[t] = affine(attn->q_b_proj->weight, attn->q_b_proj->bias, q_latent.data());
      }
      const Row kv_a = affine(attn->kv_a_proj_with_mqa->weight, attn->kv_a_proj_with_mqa->bias, xt);
      const Row c = normalize(slice(kv_a, 0, dc), attn->kv_a_layernorm);  // the latent, [d_c]
      k_rope[t] = rotate_halves(slice(kv_a, dc, dr), t, s.rope_theta);
      kv[t] = affine(attn->kv_b_proj->weight, attn->kv_b_proj->bias, c.data());  // [H·(d_n + d_v)]
    }
    for (int64_t i = 0; i < T; ++i) {
      Row attended(static_cast<size_t>(H * dv), 0.0);
      for (int64_t h = 0; h < H; ++h) {
        const Row q_nope = slice(q[i], h * (dn + dr), dn);
        const Row q_rope = rotate_halves(slice(q[i], h * (dn + dr) + dn, dr), i, s.rope_theta);
        Row scores;
        for (int64_t j = 0; j <= i; ++j) {
          const Row k_nope = slice(kv[j], h * (dn + dv), dn);
          scores.push_back((dot(q_nope, k_nope) + dot(q_rope, k_rope[j])) /
                           std::sqrt(static_cast<double>(dn + dr)));
        }
        const Row p = softmax(scores);
        for (int64_t j = 0; j <= i; ++j) {
          for (int64_t c = 0; c < dv; ++c)
            attended[h * dv + c] += p[j] * kv[j][h * (dn + dv) + dn + c];
        }
      }
      expected[i] = affine(attn->o_proj->weight, attn->o_proj->bias, attended.data());
    }
    expect_rows_equal(all, last, expected);
  }
}

}  // namespace
}  // namespace kvlab::nn
