#include "infer/decode_weights.h"

#include <stdexcept>
#include <string>

#include "kernels/convert.h"
#include "kernels/fast_decoder.h"
#include "kernels/matvec.h"

namespace kvlab::infer {

int64_t DenseWeights::bytes() const {
  // as stored: bf16 panels read their padding too
  const int64_t stored =
      dtype == DType::kF32 ? float_bytes(weight) : static_cast<int64_t>(packed.size());
  return stored + float_bytes(bias);
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
  convert_dense(dense, dtype, fastest_weight_order(dtype));
}

void convert_dense(DenseWeights& dense, DType dtype, WeightOrder order) {
  if (!matvec_supports(dtype)) {
    throw std::invalid_argument("weight dtype " + std::string(dtype_name(dtype)) +
                                ": the dense layers take f32, bf16, f16, q8_0 or q4_0");
  }
  if (dense.empty() || (dtype == dense.dtype && order == dense.weight_order)) return;
  if (dense.dtype != DType::kF32 || dense.weight_order != WeightOrder::kRows) {
    throw std::logic_error("convert_dense: the weights are already " +
                           std::string(dtype_name(dense.dtype)) + " " +
                           weight_order_name(dense.weight_order));
  }
  if (dtype == DType::kF32) {  // f32 panels: the same floats reordered
    WeightFloats panels(static_cast<size_t>(panel_bytes(dtype, dense.out, dense.in)) /
                        sizeof(float));
    pack_panels(dtype, reinterpret_cast<const std::byte*>(dense.weight.data()), dense.out, dense.in,
                reinterpret_cast<std::byte*>(panels.data()));
    dense.weight = std::move(panels);
    dense.weight_order = order;
    return;
  }
  dense.packed.resize(static_cast<size_t>(dense.out * row_bytes(dtype, dense.in)));
  store_rows(dense.weight.data(), dense.out, dense.in, dtype, dense.packed.data());
  dense.weight = {};
  dense.dtype = dtype;
  if (order == WeightOrder::kPanels) {
    PackedBytes panels(static_cast<size_t>(panel_bytes(dtype, dense.out, dense.in)));
    pack_panels(dtype, dense.packed.data(), dense.out, dense.in, panels.data());
    dense.packed = std::move(panels);
  }
  dense.weight_order = order;
}

}  // namespace kvlab::infer
