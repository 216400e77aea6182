#include "nn/linear_attention.h"

namespace kvlab::nn {
namespace {

torch::Tensor feature_map(const torch::Tensor& z) { return torch::elu(z) + 1; }

}  // namespace

LinearAttentionImpl::LinearAttentionImpl(const AttentionSpec& spec,
                                         const torch::TensorOptions& options)
    : AttentionImpl(spec) {
  const int64_t D = spec.d_model, Hd = spec.n_heads * spec.head_dim;
  qkv_proj = register_module("qkv_proj", Linear(D, Hd, spec.bias != BiasKind::kNone, options));
  o_proj = register_module("o_proj", Linear(Hd, D, spec.bias == BiasKind::kAll, options));
}

torch::Tensor LinearAttentionImpl::forward(const torch::Tensor& x, int64_t) {
  const torch::Tensor z = split_heads(qkv_proj(x), spec_.n_heads).transpose(1, 2);  // [B, H, T, d]
  const torch::Tensor phi = feature_map(z);
  torch::Tensor affinity = torch::matmul(phi, phi.transpose(-1, -2));  // [B, H, T, T], > 0
  if (spec_.causal) affinity = affinity.tril();
  const torch::Tensor y = torch::matmul(affinity, z) / affinity.sum(-1, /*keepdim=*/true);
  return o_proj(y.transpose(1, 2).flatten(2));
}

LinearAttentionImpl::State LinearAttentionImpl::initial_state(
    int64_t batch, const torch::TensorOptions& options) const {
  const int64_t H = spec_.n_heads, d = spec_.head_dim;
  return {torch::zeros({batch, H, d, d}, options), torch::zeros({batch, H, d}, options)};
}

torch::Tensor LinearAttentionImpl::step(const torch::Tensor& x, State& state) {
  const torch::Tensor z = split_heads(qkv_proj(x), spec_.n_heads).squeeze(1);  // [B, H, d]
  const torch::Tensor phi = feature_map(z);
  state.kv = state.kv + phi.unsqueeze(-1) * z.unsqueeze(-2);  // S += φ(z) zᵀ
  state.sum = state.sum + phi;
  const torch::Tensor numerator = torch::matmul(phi.unsqueeze(-2), state.kv).squeeze(-2);
  const torch::Tensor denominator = (phi * state.sum).sum(-1, /*keepdim=*/true);
  return o_proj((numerator / denominator).flatten(1)).unsqueeze(1);
}

torch::Tensor LinearAttentionImpl::forward_recurrent(const torch::Tensor& x) {
  if (!spec_.causal) throw std::logic_error("the recurrent form of linear attention is causal");
  State state = initial_state(x.size(0), x.options());
  std::vector<torch::Tensor> outputs;
  for (int64_t t = 0; t < x.size(1); ++t) outputs.push_back(step(x.narrow(1, t, 1), state));
  return torch::cat(outputs, 1);
}

std::shared_ptr<AttentionImpl> make_linear_attention(const AttentionSpec& spec,
                                                     const torch::TensorOptions& options) {
  return std::make_shared<LinearAttentionImpl>(spec, options);
}

}  // namespace kvlab::nn
