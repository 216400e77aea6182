#pragma once

#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

#include "spec/attention_spec.h"
#include "spec/model_shape.h"

namespace kvlab::testing {

inline const torch::TensorOptions kF64 = torch::TensorOptions().dtype(torch::kFloat64);

// Small shapes for exact (f64) module tests: D 16, 4 heads of 4.
inline ModelShape small_shape(PosScheme pos, ModelKind kind = ModelKind::kDecoder,
                              BiasKind bias = BiasKind::kAll) {
  ModelShape s;
  s.kind = kind;
  s.n_layers = 2;
  s.d_model = 16;
  s.n_heads = 4;
  s.head_dim = 4;
  s.mlp_width = 24;
  s.mlp_kind = MlpKind::kGelu;
  s.vocab_size = 11;
  s.max_context = 16;
  s.norm = NormKind::kLayerNorm;
  s.bias = bias;
  s.tied_embeddings = true;
  s.pos = pos;
  return s;
}

// Turns a shape into a Llama-style block: RMSNorm, SwiGLU, no biases, untied LM head.
inline void make_llama(ModelShape& s) {
  s.norm = NormKind::kRmsNorm;
  s.mlp_kind = MlpKind::kSwiglu;
  s.bias = BiasKind::kNone;
  s.tied_embeddings = false;
}

// Adds a DeepSeek mixture of experts after one dense layer: 4 routed (top-2) + 1 shared.
inline void add_moe(ModelShape& s, int64_t expert_width) {
  s.moe.n_routed_experts = 4;
  s.moe.n_shared_experts = 1;
  s.moe.experts_per_token = 2;
  s.moe.expert_mlp_width = expert_width;
  s.moe.n_dense_layers = 1;
}

// DeepSeek-V3's router (sigmoid scores, a correction bias for the choice, groups ranked by their
// best two, renormalised, then scaled by 2.5), or V2's (softmax, scaled by v2_scale).
inline void set_deepseek_router(MoeShape& m, bool v3, double v2_scale) {
  if (v3) {
    m.scoring = MoeScoring::kSigmoid;
    m.score_correction = true;
    m.group_score = MoeGroupScore::kTopTwoSum;
    m.normalize_top_k = true;
    m.routed_scale = 2.5;
  } else {
    m.routed_scale = v2_scale;
  }
}

inline AttentionSpec spec_of(const std::string& text, const ModelShape& shape) {
  return AttentionSpec::parse(text, shape, DType::kF32);
}

// y = W x + b for one row x, with W [out, in] (a Linear's weight) and b [out] or undefined.
inline std::vector<double> affine(const torch::Tensor& w, const torch::Tensor& b, const double* x) {
  std::vector<double> y(static_cast<size_t>(w.size(0)));
  for (int64_t o = 0; o < w.size(0); ++o) {
    double sum = b.defined() ? b[o].item<double>() : 0.0;
    for (int64_t i = 0; i < w.size(1); ++i) sum += w[o][i].item<double>() * x[i];
    y[static_cast<size_t>(o)] = sum;
  }
  return y;
}

inline void copy_into(torch::Tensor dst, const torch::Tensor& src) {
  torch::NoGradGuard no_grad;
  dst.copy_(src);
}

// Largest absolute difference, NaN-aware: a NaN anywhere makes it infinite.
inline double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.sizes() != b.sizes()) return std::numeric_limits<double>::infinity();
  if (torch::isnan(a).any().item<bool>() || torch::isnan(b).any().item<bool>()) {
    return std::numeric_limits<double>::infinity();
  }
  return (a - b).abs().max().item<double>();
}

// RoPE in the halves form at one position, written out: channel i < w/2 turns with channel
// i + w/2 by pos · θ^(−2i/w).
inline std::vector<double> rotate_halves(std::vector<double> v, int64_t pos, double theta) {
  const size_t half = v.size() / 2;
  std::vector<double> out(v.size());
  for (size_t i = 0; i < half; ++i) {
    const double angle =
        static_cast<double>(pos) *
        std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(v.size()));
    out[i] = v[i] * std::cos(angle) - v[i + half] * std::sin(angle);
    out[i + half] = v[i + half] * std::cos(angle) + v[i] * std::sin(angle);
  }
  return out;
}

}  // namespace kvlab::testing
