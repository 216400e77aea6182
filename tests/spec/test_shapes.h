#pragma once

#include "spec/model_shape.h"

namespace kvlab::testing {

// A tiny GPT-style decoder whose counts are easy to do by hand:
// D 8, 2 heads of 4, 2 layers, GELU MLP 16, vocab 10, 6 learned positions, LayerNorm,
// biases everywhere, tied embeddings.
inline ModelShape tiny_gpt() {
  ModelShape s;
  s.kind = ModelKind::kDecoder;
  s.n_layers = 2;
  s.d_model = 8;
  s.n_heads = 2;
  s.head_dim = 4;
  s.mlp_width = 16;
  s.mlp_kind = MlpKind::kGelu;
  s.vocab_size = 10;
  s.max_context = 6;
  s.norm = NormKind::kLayerNorm;
  s.bias = BiasKind::kAll;
  s.tied_embeddings = true;
  s.pos = PosScheme::kLearned;
  return s;
}

// A Llama-style decoder with RoPE: 16 heads of 64, D 1024.
inline ModelShape rope_decoder(int64_t n_heads = 16, int64_t head_dim = 64) {
  ModelShape s;
  s.kind = ModelKind::kDecoder;
  s.n_layers = 4;
  s.d_model = n_heads * head_dim;
  s.n_heads = n_heads;
  s.head_dim = head_dim;
  s.mlp_width = 4 * s.d_model;
  s.mlp_kind = MlpKind::kSwiglu;
  s.vocab_size = 1000;
  s.max_context = 4096;
  s.norm = NormKind::kRmsNorm;
  s.bias = BiasKind::kNone;
  s.tied_embeddings = false;
  s.pos = PosScheme::kRope;
  return s;
}

// A non-causal encoder for the synthetic tasks (digits in, a class per token out).
inline ModelShape tiny_encoder() {
  ModelShape s = tiny_gpt();
  s.kind = ModelKind::kEncoder;
  return s;
}

}  // namespace kvlab::testing
