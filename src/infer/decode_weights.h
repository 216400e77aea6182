#pragma once

#include <cstdint>
#include <vector>

#include "spec/attention_spec.h"
#include "spec/model_shape.h"

namespace kvlab::infer {

// A trained model's weights as plain f32 arrays, in the layout the decode step reads: what
// DecodeModel needs and nothing of libtorch. Filled from the modules by
// load_decode_weights() (infer/load_decode_weights.h).

// y = W x + b, W [out][in] row-major (torch's Linear layout).
struct DenseWeights {
  std::vector<float> weight;  // [out][in]
  std::vector<float> bias;    // [out], or empty
  int64_t in = 0;
  int64_t out = 0;
  bool empty() const { return weight.empty(); }
};

// LayerNorm (weight, bias) or RMSNorm (weight) over `width`.
struct NormWeights {
  NormKind kind = NormKind::kRmsNorm;
  std::vector<float> weight;  // [width]
  std::vector<float> bias;    // [width] (LayerNorm), or empty
  float eps = 1e-5f;
  int64_t width = 0;
  bool empty() const { return weight.empty(); }
};

struct MlpWeights {
  MlpKind kind = MlpKind::kGelu;
  DenseWeights gate;  // SwiGLU only
  DenseWeights up;
  DenseWeights down;
};

// Dense MLP, or DeepSeek's mixture: the router, top-k routed experts chosen and weighted as
// `routing` says (spec/model_shape.h's MoeShape), plus the always-on shared experts.
struct FeedForwardWeights {
  MlpWeights dense;     // when router is empty
  DenseWeights router;  // [n_routed][D], no bias
  MoeShape routing;
  std::vector<float> score_correction;  // [n_routed] (V3), or empty
  std::vector<MlpWeights> experts;      // routed
  std::vector<MlpWeights> shared_experts;
  bool is_moe() const { return !router.empty(); }
};

// One attention layer. Which fields are set depends on the variant family:
//  standard (mha ... q-mqa): query (q_proj | qk_proj | qkv_proj), key (k_proj), value
//    (v_proj), content (kv_proj: the shared K=V stream), key_norm (knorm, or
//    with query_norm qknorm);
//  gva: query (q_proj, H·(d_n + d_r)), value (v_proj), rope_key (r_proj), query_norm (qnorm),
//    key_maps M [H][d_h][d_n];
//  mla: query (q_proj or q_b_proj), query_down (q_a_proj) + query_down_norm, latent
//    (kv_a_proj_with_mqa), latent_norm, key_up_t = W_uk,hᵀ [H][d_c][d_n],
//    value_up = W_uv,h [H][d_v][d_c], value_up_bias [H][d_v] (or empty);
//  gla: as mla (full-rank query), latent (kv_a_proj) giving C rows of [c_g ; k^rope_g];
//  gta: as gva with key_maps empty (M_h is the selection of the first d_n channels);
//  linear: query (qkv_proj).
// Every family: output (o_proj).
struct AttentionWeights {
  AttentionSpec spec;
  DenseWeights query, key, value, content, rope_key, query_down, latent, output;
  NormWeights key_norm, query_norm, query_down_norm, latent_norm;
  std::vector<float> key_maps;
  std::vector<float> key_up_t;
  std::vector<float> value_up;
  std::vector<float> value_up_bias;
};

struct BlockWeights {
  NormWeights input_norm;
  AttentionWeights attention;
  NormWeights post_attention_norm;
  FeedForwardWeights mlp;
};

struct DecodeWeights {
  ModelShape shape;
  std::vector<float> embed_tokens;     // [V][D]
  std::vector<float> embed_positions;  // [positions][D] (learned), or empty
  std::vector<BlockWeights> layers;
  NormWeights final_norm;
  DenseWeights lm_head;  // [V][D]: the embedding itself when tied
};

}  // namespace kvlab::infer
