#pragma once

#include <torch/torch.h>

#include <memory>

#include "nn/layers.h"
#include "spec/model_shape.h"

namespace kvlab::nn {

// The MLP of one block: dense GELU (up, down) or SwiGLU (gate, up, down), or a DeepSeek
// mixture of experts (router + routed experts + always-on shared experts).
class FeedForwardImpl : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(const torch::Tensor& x) = 0;  // [B, T, D] -> [B, T, D]
};

class DenseMlpImpl : public FeedForwardImpl {
 public:
  DenseMlpImpl(const ModelShape& shape, int64_t width, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x) override;

  MlpKind kind;
  Linear gate_proj{nullptr};  // SwiGLU only
  Linear up_proj{nullptr};
  Linear down_proj{nullptr};
};

// Hugging Face's DeepSeek layout: gate (the router, with V3's e_score_correction_bias),
// experts.{e}, and shared_experts as one MLP of n_shared · expert width (the sum of n_shared
// MLPs is one MLP of their concatenated rows).
class MoeMlpImpl : public FeedForwardImpl {
 public:
  MoeMlpImpl(const ModelShape& shape, const torch::TensorOptions& options);
  // Routes every token as MoeShape says; each expert runs on its tokens only.
  torch::Tensor forward(const torch::Tensor& x) override;
  // The routing alone: chosen experts [N, k] and their weights [N, k] for tokens [N, D].
  std::pair<torch::Tensor, torch::Tensor> route(const torch::Tensor& tokens);

  MoeShape moe;
  Linear gate{nullptr};            // router: D -> n_routed_experts, no bias
  torch::Tensor score_correction;  // [n_routed_experts], not trained; or undefined
  torch::nn::ModuleList experts;
  std::shared_ptr<DenseMlpImpl> shared_experts;  // or nullptr
};

std::shared_ptr<FeedForwardImpl> make_feed_forward(const ModelShape& shape, int64_t layer,
                                                   const torch::TensorOptions& options);

}  // namespace kvlab::nn
