#include "nn/transformer.h"

#include <stdexcept>
#include <string>

#include "nn/linear_function.h"

namespace kvlab::nn {
namespace {

// GPT-2's initialisation for embeddings: N(0, 0.02).
constexpr double kEmbeddingStd = 0.02;

torch::Tensor embedding(torch::nn::Module& owner, const char* name, int64_t rows, int64_t width,
                        const torch::TensorOptions& options) {
  torch::Tensor t = owner.register_parameter(name, torch::empty({rows, width}, options));
  torch::NoGradGuard no_grad;
  t.normal_(0.0, kEmbeddingStd);
  return t;
}

}  // namespace

TransformerBlockImpl::TransformerBlockImpl(const ModelConfig& config, int64_t layer,
                                           const torch::TensorOptions& options) {
  const ModelShape& s = config.shape;
  input_layernorm =
      register_module("input_layernorm", Norm(s.norm, s.d_model, options, s.norm_eps));
  self_attn = register_module("self_attn", make_attention(config.attn, options));
  post_attention_layernorm =
      register_module("post_attention_layernorm", Norm(s.norm, s.d_model, options, s.norm_eps));
  mlp = register_module("mlp", make_feed_forward(s, layer, options));
}

torch::Tensor TransformerBlockImpl::forward(const torch::Tensor& x, int64_t start_pos) {
  const torch::Tensor h = x + self_attn->forward(input_layernorm(x), start_pos);
  return h + mlp->forward(post_attention_layernorm(h));
}

TransformerImpl::TransformerImpl(const ModelConfig& config, const torch::TensorOptions& options)
    : shape(config.shape) {
  const int64_t D = shape.d_model;
  const bool bias = shape.bias == BiasKind::kAll;
  switch (shape.kind) {
    case ModelKind::kDecoder:
    case ModelKind::kEncoder:
      embed_tokens = embedding(*this, "embed_tokens", shape.vocab_size, D, options);
      break;
    case ModelKind::kVit:
      patch_embed = register_module(
          "patch_embed",
          Linear(shape.patch_size * shape.patch_size * shape.image_channels, D, bias, options));
      if (shape.class_token) {
        cls_token = register_parameter("cls_token", torch::empty({D}, options));
        torch::NoGradGuard no_grad;
        cls_token.normal_(0.0, kEmbeddingStd);
      }
      break;
    case ModelKind::kSet:
      input_proj = register_module("input_proj", Linear(shape.set_input_dim, D, bias, options));
      break;
  }
  if (shape.pos == PosScheme::kLearned) {
    embed_positions = embedding(*this, "embed_positions", shape.n_positions(), D, options);
  }
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t layer = 0; layer < shape.n_layers; ++layer) {
    layers->push_back(TransformerBlock(config, layer, options));
  }
  norm = register_module("norm", Norm(shape.norm, D, options, shape.norm_eps));
}

torch::Tensor TransformerImpl::embed(const torch::Tensor& input, int64_t start_pos) {
  torch::Tensor h;
  switch (shape.kind) {
    case ModelKind::kDecoder:
    case ModelKind::kEncoder:
      h = torch::nn::functional::embedding(input, embed_tokens);  // [B, T, D]
      break;
    case ModelKind::kVit: {
      // [B, C, S, S] -> [B, (S/p)², p·p·C]: non-overlapping patches, channels last
      const int64_t b = input.size(0), c = input.size(1), p = shape.patch_size;
      const int64_t side = shape.image_size / p;
      const torch::Tensor patches = input.view({b, c, side, p, side, p})
                                        .permute({0, 2, 4, 3, 5, 1})
                                        .reshape({b, side * side, p * p * c});
      h = patch_embed(patches);
      if (shape.class_token) h = torch::cat({cls_token.expand({b, 1, shape.d_model}), h}, 1);
      break;
    }
    case ModelKind::kSet:
      h = input_proj(input);
      break;
  }
  if (shape.pos == PosScheme::kSinusoidal) {
    h = h + sinusoid_positions(start_pos, h.size(1), shape.d_model, h.options());
  }
  if (embed_positions.defined()) {
    const int64_t t = h.size(1);
    if (start_pos + t > embed_positions.size(0)) {
      throw std::invalid_argument(
          "positions " + std::to_string(start_pos) + ".." + std::to_string(start_pos + t - 1) +
          " exceed the learned table of " + std::to_string(embed_positions.size(0)));
    }
    h = h + embed_positions.narrow(0, start_pos, t);
  }
  return h;
}

torch::Tensor TransformerImpl::forward(const torch::Tensor& hidden, int64_t start_pos) {
  torch::Tensor h = hidden;
  for (const auto& layer : *layers) h = layer->as<TransformerBlockImpl>()->forward(h, start_pos);
  return norm(h);
}

TransformerModelImpl::TransformerModelImpl(const ModelConfig& config,
                                           const torch::TensorOptions& options)
    : config_(config) {
  const ModelShape& s = config.shape;
  s.validate();
  config.attn.validate();
  const bool bias = s.bias == BiasKind::kAll;
  model = register_module("model", Transformer(config, options));
  switch (s.kind) {
    case ModelKind::kDecoder:
      if (!s.tied_embeddings) {
        lm_head = register_module("lm_head", Linear(s.d_model, s.vocab_size, false, options));
      }
      break;
    case ModelKind::kEncoder:
      if (!s.tied_embeddings) {
        lm_head = register_module("lm_head", Linear(s.d_model, s.output_classes(), bias, options));
      }
      break;
    case ModelKind::kVit:
      head = register_module("head", Linear(s.d_model, s.n_classes, bias, options));
      break;
    case ModelKind::kSet:
      head = register_module("head", Linear(s.d_model, 1, bias, options));
      break;
  }
}

void TransformerModelImpl::set_matmul_precision(MatmulPrecision precision) {
  tied_head_precision_ = precision;
  for (const auto& module : modules()) {
    if (auto* linear_module = module->as<LinearImpl>()) linear_module->matmul_precision = precision;
  }
}

torch::Tensor TransformerModelImpl::forward(const torch::Tensor& input, int64_t start_pos) {
  const ModelShape& s = config_.shape;
  const torch::Tensor h = model->forward(model->embed(input, start_pos), start_pos);
  switch (s.kind) {
    case ModelKind::kDecoder:
    case ModelKind::kEncoder:
      return lm_head ? lm_head(h)
                     : linear(h, model->embed_tokens, torch::Tensor(), tied_head_precision_);
    case ModelKind::kVit: {
      const torch::Tensor pooled = s.class_token ? h.select(1, 0) : h.mean(1);
      return head(pooled);
    }
    case ModelKind::kSet:
      return head(h).squeeze(-1);
  }
  return h;
}

int64_t TransformerModelImpl::parameter_count() const {
  int64_t total = 0;
  for (const torch::Tensor& p : parameters()) total += p.numel();
  return total;
}

}  // namespace kvlab::nn
