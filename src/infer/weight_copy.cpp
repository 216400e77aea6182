#include "infer/weight_copy.h"

namespace kvlab::infer {

namespace {

template <class Floats>
Floats floats_as(const torch::Tensor& t) {
  if (!t.defined()) return {};
  const torch::Tensor f = t.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  return Floats(f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
}

}  // namespace

std::vector<float> floats(const torch::Tensor& t) { return floats_as<std::vector<float>>(t); }

DenseWeights dense_weights(const nn::Linear& linear, DType weight_dtype) {
  DenseWeights d;
  if (!linear) return d;
  d.weight = floats_as<WeightFloats>(linear->weight);
  d.bias = floats(linear->bias);
  d.out = linear->weight.size(0);
  d.in = linear->weight.size(1);
  convert_dense(d, weight_dtype);
  return d;
}

NormWeights norm_weights(const nn::Norm& n) {
  NormWeights w;
  if (!n) return w;
  w.kind = n->kind;
  w.weight = floats(n->weight);
  if (n->kind == NormKind::kLayerNorm) w.bias = floats(n->bias);
  w.eps = static_cast<float>(n->eps);
  w.width = n->weight.size(0);
  return w;
}

AbsorbedUpProjections absorbed_up_projections(const nn::LinearImpl& kv_b_proj,
                                              const AttentionSpec& s) {
  const torch::Tensor kv_b =
      kv_b_proj.weight.detach().view({s.n_heads, s.nope_dim + s.value_dim, s.latent_dim});
  AbsorbedUpProjections w;
  w.key_up_t = floats(kv_b.narrow(1, 0, s.nope_dim).transpose(1, 2));  // [H, d_c, d_n]
  w.value_up = floats(kv_b.narrow(1, s.nope_dim, s.value_dim));        // [H, d_v, d_c]
  if (kv_b_proj.bias.defined()) {
    w.value_up_bias = floats(kv_b_proj.bias.detach()
                                 .view({s.n_heads, s.nope_dim + s.value_dim})
                                 .narrow(1, s.nope_dim, s.value_dim));
  }
  return w;
}

}  // namespace kvlab::infer
