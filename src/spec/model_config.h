#pragma once

#include <cstdint>
#include <string_view>

#include "spec/attention_spec.h"
#include "spec/exact.h"
#include "spec/model_shape.h"

namespace kvlab {

struct ModelMacs {
  Exact total;
  Exact attention;  // every MAC inside the attention blocks (projections included)
};

// A model shape with one attention variant in every layer: the unit the calculator,
// the trainer and the decode runtime all size themselves from.
struct ModelConfig {
  ModelShape shape;
  AttentionSpec attn;

  // Validates the shape, then parses and validates the spec against it.
  static ModelConfig make(const ModelShape& shape, std::string_view attn_text, DType cache_dtype);

  Exact param_count() const;
  Exact attention_param_count() const;  // all layers
  Exact embedding_param_count() const;  // inputs, positions and output head
  Exact mlp_param_count(int64_t layer) const;
  // Prefill of n tokens, output head over every token (as the seed's Table 6 counts it).
  ModelMacs prefill_macs(int64_t n_tokens) const;
  // One decoded token at `context` cached tokens; zero for variants that cannot decode.
  ModelMacs decode_macs(int64_t context) const;

  Exact cache_bytes_per_token() const;  // all layers
  // Bytes a cache holds for `batch` sequences of `context` tokens (recurrent state included).
  Exact cache_bytes(int64_t context, int64_t batch) const;
};

}  // namespace kvlab
