#include "infer/decode_weights.h"

#include <stdexcept>
#include <string>

#include "kernels/convert.h"
#include "kernels/fast_decoder.h"
#include "kernels/matvec.h"

namespace kvlab::infer {

int64_t DenseWeights::bytes() const {
  return out * row_bytes(dtype, in) + static_cast<int64_t>(bias.size() * sizeof(float));
}

int64_t DecodeWeights::bytes_read_per_token() const {
  const int64_t D = shape.d_model;
  int64_t bytes = D * static_cast<int64_t>(sizeof(float)) * (embed_positions.empty() ? 1 : 2);
  for (const BlockWeights& layer : layers) {
    bytes += layer.input_norm.bytes() + layer.attention->weight_bytes() +
             layer.post_attention_norm.bytes();
    const FeedForwardWeights& f = layer.mlp;
    if (!f.is_moe()) {
      bytes += f.dense.bytes();
      continue;
    }
    bytes += f.router.bytes() + float_bytes(f.score_correction);
    for (const MlpWeights& e : f.shared_experts) bytes += e.bytes();
    int64_t routed = 0;
    for (const MlpWeights& e : f.experts) routed += e.bytes();
    if (!f.experts.empty()) {
      bytes += routed / static_cast<int64_t>(f.experts.size()) * f.routing.experts_per_token;
    }
  }
  return bytes + final_norm.bytes() + lm_head.bytes();
}

void convert_dense(DenseWeights& dense, DType dtype) {
  convert_dense(dense, dtype, fastest_q8_0_order());
}

void convert_dense(DenseWeights& dense, DType dtype, BlockOrder q8_0_order) {
  if (!matvec_supports(dtype)) {
    throw std::invalid_argument("weight dtype " + std::string(dtype_name(dtype)) +
                                ": the dense layers take f32, bf16, f16, q8_0 or q4_0");
  }
  if (dense.empty() || dtype == dense.dtype) return;
  if (dense.dtype != DType::kF32) {
    throw std::logic_error("convert_dense: the weights are already " +
                           std::string(dtype_name(dense.dtype)));
  }
  dense.packed.resize(static_cast<size_t>(dense.out * row_bytes(dtype, dense.in)));
  store_rows(dense.weight.data(), dense.out, dense.in, dtype, dense.packed.data());
  dense.weight = {};
  dense.dtype = dtype;
  if (dtype == DType::kQ8_0 && q8_0_order == BlockOrder::kInterleaved) {
    std::vector<std::byte> interleaved(dense.packed.size());
    interleave_q8_0_rows(dense.packed.data(), dense.out, dense.in, interleaved.data());
    dense.packed = std::move(interleaved);
    dense.block_order = BlockOrder::kInterleaved;
  }
}

}  // namespace kvlab::infer
