#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "infer/decode_weights.h"
#include "nn/attention.h"
#include "nn/layers.h"

namespace kvlab::infer {

// A module's tensors copied out as the f32 arrays the decode step reads.
std::vector<float> floats(const torch::Tensor& t);  // empty for an undefined tensor
// A Linear's weights stored in weight_dtype (convert_dense), empty for a missing layer.
DenseWeights dense_weights(const nn::Linear& linear, DType weight_dtype = DType::kF32);
NormWeights norm_weights(const nn::Norm& norm);  // empty for a missing norm

// mla's and gla's kv_b weight as the decode step absorbs it (decode_weights.h).
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
