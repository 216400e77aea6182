#pragma once

#include <torch/torch.h>

#include <memory>

#include "nn/attention.h"
#include "nn/feed_forward.h"
#include "nn/layers.h"
#include "spec/model_config.h"

namespace kvlab::nn {

// Pre-norm block: x + attn(norm(x)), then x + mlp(norm(x)). Names follow Hugging Face.
class TransformerBlockImpl : public torch::nn::Module {
 public:
  TransformerBlockImpl(const ModelConfig& config, int64_t layer,
                       const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x, int64_t start_pos = 0);  // [B, T, D]

  Norm input_layernorm{nullptr};
  std::shared_ptr<AttentionImpl> self_attn;
  Norm post_attention_layernorm{nullptr};
  std::shared_ptr<FeedForwardImpl> mlp;
};
TORCH_MODULE(TransformerBlock);

// The input side and the trunk, by model kind: token (+ learned position) embeddings for
// decoder and encoder, a patch embedding with class token for vit, an input projection for
// sets; then the blocks and the final norm. Registered as "model" inside TransformerModel.
class TransformerImpl : public torch::nn::Module {
 public:
  TransformerImpl(const ModelConfig& config, const torch::TensorOptions& options);
  // tokens [B, T] int64 | images [B, C, S, S] | set elements [B, N, F] -> hidden [B, T', D]
  torch::Tensor embed(const torch::Tensor& input, int64_t start_pos = 0);
  torch::Tensor forward(const torch::Tensor& hidden, int64_t start_pos = 0);  // blocks + norm

  ModelShape shape;
  torch::Tensor embed_tokens;     // [V, D] (decoder, encoder)
  torch::Tensor embed_positions;  // [positions, D] (learned)
  Linear patch_embed{nullptr};    // p·p·C -> D (vit), a stride-p convolution as a matmul
  torch::Tensor cls_token;        // [D] (vit with class-token pooling)
  Linear input_proj{nullptr};     // F -> D (set)
  torch::nn::ModuleList layers;
  Norm norm{nullptr};
};
TORCH_MODULE(Transformer);

// Every model kind of DESIGN.md, built from one ModelConfig:
//  decoder: causal LM, tokens [B, T] -> logits [B, T, V] (GPT-2 or Llama style);
//  encoder: non-causal, tokens [B, T] -> one class per token [B, T, C];
//  vit:     images [B, C, S, S] -> classes [B, C'] (class token or mean pooling);
//  set:     elements [B, N, F] -> one logit per element [B, N], no positions.
class TransformerModelImpl : public torch::nn::Module {
 public:
  TransformerModelImpl(const ModelConfig& config, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& input, int64_t start_pos = 0);

  const ModelConfig& config() const { return config_; }
  int64_t parameter_count() const;
  // The precision of every linear's products (and of the tied output head's): training's
  // --matmul-precision. Not part of the model: a checkpoint loads at f32.
  void set_matmul_precision(MatmulPrecision precision);

  Transformer model{nullptr};
  Linear lm_head{nullptr};  // decoder/encoder output when untied (decoder: no bias)
  Linear head{nullptr};     // vit and set output

 private:
  ModelConfig config_;
  MatmulPrecision tied_head_precision_ = MatmulPrecision::kF32;
};
TORCH_MODULE(TransformerModel);

}  // namespace kvlab::nn
