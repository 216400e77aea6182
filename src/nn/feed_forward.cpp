#include "nn/feed_forward.h"

#include <limits>

#include "nn/gelu.h"

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
  return down_proj(gelu(up_proj(x), kind == MlpKind::kGeluTanh));
}

MoeMlpImpl::MoeMlpImpl(const ModelShape& shape, const torch::TensorOptions& options)
    : moe(shape.moe) {
  gate = register_module("gate", Linear(shape.d_model, moe.n_routed_experts, false, options));
  if (moe.score_correction) {
    // DeepSeek-V3 adjusts this bias outside gradient descent (auxiliary-loss-free balancing)
    score_correction = gate->register_parameter(
        "e_score_correction_bias", torch::zeros({moe.n_routed_experts}, options), false);
  }
  experts = register_module("experts", torch::nn::ModuleList());
  for (int64_t e = 0; e < moe.n_routed_experts; ++e) {
    experts->push_back(std::make_shared<DenseMlpImpl>(shape, moe.expert_mlp_width, options));
  }
  if (moe.n_shared_experts > 0) {
    shared_experts = register_module(
        "shared_experts", std::make_shared<DenseMlpImpl>(
                              shape, moe.n_shared_experts * moe.expert_mlp_width, options));
  }
}

std::pair<torch::Tensor, torch::Tensor> MoeMlpImpl::route(const torch::Tensor& tokens) {
  const torch::Tensor logits = gate(tokens).to(torch::kFloat32);  // [N, E]
  const torch::Tensor scores =
      moe.scoring == MoeScoring::kSoftmax ? torch::softmax(logits, -1) : torch::sigmoid(logits);
  // the choice ranks the scores (plus the correction bias); the weights are the scores
  torch::Tensor choice = scores.detach();
  if (score_correction.defined()) choice = choice + score_correction.to(torch::kFloat32);
  if (moe.n_expert_groups > 1) {
    const int64_t N = tokens.size(0), G = moe.n_expert_groups;
    const torch::Tensor grouped = choice.view({N, G, -1});  // [N, G, E/G]
    const torch::Tensor group_scores = moe.group_score == MoeGroupScore::kMax
                                           ? std::get<0>(grouped.max(-1))
                                           : std::get<0>(grouped.topk(2, -1)).sum(-1);  // [N, G]
    const torch::Tensor best_groups = std::get<1>(group_scores.topk(moe.groups_per_token, -1));
    const torch::Tensor keep = torch::zeros_like(group_scores, torch::kBool)
                                   .scatter(1, best_groups, true)
                                   .unsqueeze(-1)
                                   .expand_as(grouped)
                                   .reshape_as(choice);  // [N, E]
    choice = choice.masked_fill(keep.logical_not(), -std::numeric_limits<float>::infinity());
  }
  const torch::Tensor chosen = std::get<1>(choice.topk(moe.experts_per_token, -1));  // [N, k]
  torch::Tensor weights = scores.gather(1, chosen);
  if (moe.normalize_top_k) weights = weights / (weights.sum(-1, true) + 1e-20);
  return {chosen, (weights * moe.routed_scale).to(tokens.scalar_type())};
}

torch::Tensor MoeMlpImpl::forward(const torch::Tensor& x) {
  const torch::Tensor tokens = x.reshape({-1, x.size(-1)});  // [N, D]
  const auto [chosen, weights] = route(tokens);              // [N, k] each
  torch::Tensor out = torch::zeros_like(tokens);
  for (size_t e = 0; e < experts->size(); ++e) {
    const torch::Tensor hit = (chosen == static_cast<int64_t>(e));  // [N, k]
    const torch::Tensor rows = hit.any(-1).nonzero().squeeze(-1);
    if (rows.numel() == 0) continue;
    const torch::Tensor w = (weights * hit).sum(-1).index_select(0, rows).unsqueeze(-1);
    const torch::Tensor y = experts[e]->as<DenseMlpImpl>()->forward(tokens.index_select(0, rows));
    out = out.index_add(0, rows, y * w);
  }
  if (shared_experts) out = out + shared_experts->forward(tokens);
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
