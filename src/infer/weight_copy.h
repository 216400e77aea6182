#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "infer/decode_weights.h"
#include "nn/attention.h"
#include "nn/layers.h"

namespace kvlab::infer {

// A module's tensors copied out as the f32 arrays the decode step reads.
std::vector<float> floats(const torch::Tensor& t);     // empty for an undefined tensor
DenseWeights dense_weights(const nn::Linear& linear);  // empty for a missing layer
NormWeights norm_weights(const nn::Norm& norm);        // empty for a missing norm

// mla's and gla's kv_b weight [H·(d_n + d_v), d_c] (per head d_n rows of W_uk, then d_v rows of
// W_uv) as the decode step absorbs it.
struct AbsorbedUpProjections {
  std::vector<float> key_up_t;       // W_uk,hᵀ: [H][d_c][d_n]
  std::vector<float> value_up;       // W_uv,h: [H][d_v][d_c]
  std::vector<float> value_up_bias;  // [H][d_v], or empty
};
AbsorbedUpProjections absorbed_up_projections(const nn::LinearImpl& kv_b_proj,
                                              const AttentionSpec& spec);

// The module of the family the spec names (make_attention built it from the same spec).
template <class Module>
Module& module_of(nn::AttentionImpl& attn) {
  auto* module = dynamic_cast<Module*>(&attn);
  if (module == nullptr) {
    throw std::invalid_argument("the " + std::string(attn_family_name(attn.spec().family())) +
                                " family's attention layer is not its family's module");
  }
  return *module;
}

}  // namespace kvlab::infer
