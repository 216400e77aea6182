#pragma once

#include "infer/decode_weights.h"
#include "nn/transformer.h"

namespace kvlab::infer {

// Copies a causal model's weights into DecodeWeights: the dense layers' matrices (projections,
// MLPs, the LM head) stored in weight_dtype; embeddings, norms, biases, the router and the
// absorbed per-head maps in f32 (absorption-ready: W_uk transposed per head for mla). Throws
// std::invalid_argument for models that cannot decode (non-causal, "+" variants) and for a
// weight dtype the dense layers do not take (fp8).
DecodeWeights load_decode_weights(nn::TransformerModel& model, DType weight_dtype = DType::kF32);

}  // namespace kvlab::infer
