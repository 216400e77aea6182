#pragma once

#include "infer/decode_weights.h"
#include "nn/transformer.h"

namespace kvlab::infer {

// Copies a causal model's weights into DecodeWeights (converted to f32, absorption-ready:
// W_uk transposed per head for mla). Throws std::invalid_argument for models that cannot
// decode (non-causal, "+" variants).
DecodeWeights load_decode_weights(nn::TransformerModel& model);

}  // namespace kvlab::infer
