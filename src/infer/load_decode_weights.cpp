#include "infer/load_decode_weights.h"

#include <stdexcept>
#include <string>

#include "infer/weight_copy.h"
#include "nn/feed_forward.h"

namespace kvlab::infer {
namespace {

MlpWeights mlp(const nn::DenseMlpImpl& m, DType weight_dtype) {
  return {m.kind, dense_weights(m.gate_proj, weight_dtype), dense_weights(m.up_proj, weight_dtype),
          dense_weights(m.down_proj, weight_dtype)};
}

// The router stays f32: its scores pick the experts, and it is D × n_routed, small beside them.
FeedForwardWeights feed_forward(nn::FeedForwardImpl& ff, DType weight_dtype) {
  FeedForwardWeights w;
  if (auto* d = dynamic_cast<nn::DenseMlpImpl*>(&ff)) {
    w.dense = mlp(*d, weight_dtype);
    return w;
  }
  auto& moe = dynamic_cast<nn::MoeMlpImpl&>(ff);
  w.router = dense_weights(moe.gate);
  w.routing = moe.moe;
  if (moe.score_correction.defined()) w.score_correction = floats(moe.score_correction);
  for (const auto& e : *moe.experts) {
    w.experts.push_back(mlp(*e->as<nn::DenseMlpImpl>(), weight_dtype));
  }
  if (moe.shared_experts) w.shared_experts.push_back(mlp(*moe.shared_experts, weight_dtype));
  return w;
}

}  // namespace

DecodeWeights load_decode_weights(nn::TransformerModel& model, DType weight_dtype) {
  torch::NoGradGuard no_grad;
  const ModelShape& shape = model->config().shape;
  if (!shape.causal()) throw std::invalid_argument("decoding needs a causal (decoder) model");
  DecodeWeights w;
  w.shape = shape;
  const nn::TransformerImpl& trunk = *model->model;
  w.embed_tokens = floats(trunk.embed_tokens);
  w.embed_positions = floats(trunk.embed_positions);
  for (const auto& layer : *trunk.layers) {
    auto& block = *layer->as<nn::TransformerBlockImpl>();
    BlockWeights b;
    b.input_norm = norm_weights(block.input_layernorm);
    b.attention = load_decode_attention(*block.self_attn, weight_dtype);
    b.post_attention_norm = norm_weights(block.post_attention_layernorm);
    b.mlp = feed_forward(*block.mlp, weight_dtype);
    w.layers.push_back(std::move(b));
  }
  w.final_norm = norm_weights(trunk.norm);
  if (model->lm_head) {
    w.lm_head = dense_weights(model->lm_head, weight_dtype);
  } else {
    w.lm_head.weight.assign(w.embed_tokens.begin(), w.embed_tokens.end());
    w.lm_head.out = shape.vocab_size;
    w.lm_head.in = shape.d_model;
    convert_dense(w.lm_head, weight_dtype);
  }
  return w;
}

}  // namespace kvlab::infer
