#include "nn/feed_forward.h"

namespace kvlab::nn {

DenseMlpImpl::DenseMlpImpl(const ModelShape& shape, int64_t width,
                           const torch::TensorOptions& options)
    : kind(shape.mlp_kind) {
  const bool bias = shape.bias == BiasKind::kAll;
  if (kind == MlpKind::kSwiglu) {
    gate_proj = register_module("gate_proj", Linear(shape.d_model, width, bias, options));
  }
  up_proj = register_module("up_proj", Linear(shape.d_model, width, bias, options));
  down_proj = register_module("down_proj", Linear(width, shape.d_model, bias, options));
}

torch::Tensor DenseMlpImpl::forward(const torch::Tensor& x) {
  if (kind == MlpKind::kSwiglu) return down_proj(torch::silu(gate_proj(x)) * up_proj(x));
  return down_proj(torch::gelu(up_proj(x)));
}

MoeMlpImpl::MoeMlpImpl(const ModelShape& shape, const torch::TensorOptions& options)
    : experts_per_token(shape.moe.experts_per_token) {
  gate = register_module("gate", Linear(shape.d_model, shape.moe.n_routed_experts, false, options));
  experts = register_module("experts", torch::nn::ModuleList());
  for (int64_t e = 0; e < shape.moe.n_routed_experts; ++e) {
    experts->push_back(std::make_shared<DenseMlpImpl>(shape, shape.moe.expert_mlp_width, options));
  }
  shared_experts = register_module("shared_experts", torch::nn::ModuleList());
  for (int64_t e = 0; e < shape.moe.n_shared_experts; ++e) {
    shared_experts->push_back(
        std::make_shared<DenseMlpImpl>(shape, shape.moe.expert_mlp_width, options));
  }
}

torch::Tensor MoeMlpImpl::forward(const torch::Tensor& x) {
  const torch::Tensor tokens = x.reshape({-1, x.size(-1)});  // [N, D]
  const torch::Tensor probs = torch::softmax(gate(tokens), -1);
  const auto [weights, chosen] = probs.topk(experts_per_token, -1);  // [N, k]
  torch::Tensor out = torch::zeros_like(tokens);
  for (size_t e = 0; e < experts->size(); ++e) {
    const torch::Tensor hit = (chosen == static_cast<int64_t>(e));  // [N, k]
    const torch::Tensor rows = hit.any(-1).nonzero().squeeze(-1);
    if (rows.numel() == 0) continue;
    const torch::Tensor w = (weights * hit).sum(-1).index_select(0, rows).unsqueeze(-1);
    const torch::Tensor y = experts[e]->as<DenseMlpImpl>()->forward(tokens.index_select(0, rows));
    out = out.index_add(0, rows, y * w);
  }
  for (size_t e = 0; e < shared_experts->size(); ++e) {
    out = out + shared_experts[e]->as<DenseMlpImpl>()->forward(tokens);
  }
  return out.view(x.sizes());
}

std::shared_ptr<FeedForwardImpl> make_feed_forward(const ModelShape& shape, int64_t layer,
                                                   const torch::TensorOptions& options) {
  if (shape.moe.enabled() && layer >= shape.moe.n_dense_layers) {
    return std::make_shared<MoeMlpImpl>(shape, options);
  }
  return std::make_shared<DenseMlpImpl>(shape, shape.mlp_width, options);
}

}  // namespace kvlab::nn
