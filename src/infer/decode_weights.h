#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "infer/decode_attention.h"
#include "kernels/matvec.h"
#include "kernels/weight_allocator.h"
#include "spec/attention_spec.h"
#include "spec/dtype.h"
#include "spec/model_shape.h"

namespace kvlab::infer {

// A trained model's weights as plain f32 arrays, in the layout the decode step reads: what
// DecodeModel needs and nothing of libtorch. Filled from the modules by
// load_decode_weights() (infer/load_decode_weights.h).

// The dense layers' stored weights: on a cache line, large ones on huge pages
// (kernels/weight_allocator.h).
using PackedBytes = std::vector<std::byte, WeightAllocator<std::byte>>;
using WeightFloats = std::vector<float, WeightAllocator<float>>;

template <class Floats>
int64_t float_bytes(const Floats& v) {
  return static_cast<int64_t>(v.size() * sizeof(float));
}

// y = W x + b, W [out][in] row-major (torch's Linear layout), stored in `dtype`: f32 in
// `weight`, any other dtype in `packed`, in `weight_order` (rows: row_bytes(dtype, in) bytes each,
// or panels: kernels/matvec.h has both); the bias stays f32.
struct DenseWeights {
  WeightFloats weight;      // f32: [out][in], or its panels
  PackedBytes packed;       // the other dtypes' rows or panels
  std::vector<float> bias;  // [out], or empty
  DType dtype = DType::kF32;
  WeightOrder weight_order = WeightOrder::kRows;  // kernels/matvec.h
  int64_t in = 0;
  int64_t out = 0;
  bool empty() const { return out == 0; }
  const void* data() const {
    return dtype == DType::kF32 ? static_cast<const void*>(weight.data()) : packed.data();
  }
  int64_t bytes() const;  // weights and bias
};

// Stores the f32 weights of `dense` in `dtype` (rounded, or quantized per block of 32 as the
// cache does) in `order`, by default the order this CPU's decoder reads fastest
// (fastest_weight_order), releasing the f32 copy. Throws std::invalid_argument for fp8, which the
// matrix-vector kernels do not take, and for an order `dtype` does not have.
void convert_dense(DenseWeights& dense, DType dtype);
void convert_dense(DenseWeights& dense, DType dtype, WeightOrder order);

// LayerNorm (weight, bias) or RMSNorm (weight) over `width`.
struct NormWeights {
  NormKind kind = NormKind::kRmsNorm;
  std::vector<float> weight;  // [width]
  std::vector<float> bias;    // [width] (LayerNorm), or empty
  float eps = 1e-5f;
  int64_t width = 0;
  bool empty() const { return weight.empty(); }
  int64_t bytes() const { return float_bytes(weight) + float_bytes(bias); }
};

// mla's and gla's kv_b weight [H·(d_n + d_v), d_c] (per head d_n rows of W_uk, then d_v rows of
// W_uv) as the decode step absorbs it.
struct AbsorbedUpProjections {
  std::vector<float> key_up_t;       // W_uk,hᵀ: [H][d_c][d_n]
  std::vector<float> value_up;       // W_uv,h: [H][d_v][d_c]
  std::vector<float> value_up_bias;  // [H][d_v], or empty
  int64_t bytes() const {
    return float_bytes(key_up_t) + float_bytes(value_up) + float_bytes(value_up_bias);
  }
};

struct MlpWeights {
  MlpKind kind = MlpKind::kGelu;
  DenseWeights gate;  // SwiGLU only
  DenseWeights up;
  DenseWeights down;
  int64_t bytes() const { return gate.bytes() + up.bytes() + down.bytes(); }
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

struct BlockWeights {
  NormWeights input_norm;
  std::unique_ptr<const DecodeAttention> attention;  // the family's adapter and its weights
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

  // The bytes of weights one token's decode step reads: every layer's (of a mixture, the
  // router, the shared experts and experts_per_token routed ones of mean size), the norms,
  // the LM head, and one row of each embedding table.
  int64_t bytes_read_per_token() const;
};

}  // namespace kvlab::infer
