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

class MoeMlpImpl : public FeedForwardImpl {
 public:
  MoeMlpImpl(const ModelShape& shape, const torch::TensorOptions& options);
  // Top-k routing over softmax router scores; each expert runs on its tokens only.
  torch::Tensor forward(const torch::Tensor& x) override;

  int64_t experts_per_token;
  Linear gate{nullptr};  // router: D -> n_routed_experts, no bias
  torch::nn::ModuleList experts;
  torch::nn::ModuleList shared_experts;
};

std::shared_ptr<FeedForwardImpl> make_feed_forward(const ModelShape& shape, int64_t layer,
                                                   const torch::TensorOptions& options);

}  // namespace kvlab::nn
