#include "convert/source_attention.h"

#include "nn/attention.h"
#include "spec/spec_error.h"

namespace kvlab::convert {
namespace {

torch::Tensor parameter(const nn::AttentionImpl& layer, const std::string& name) {
  const auto params = layer.named_parameters();
  const torch::Tensor* found = params.find(name);
  return found ? found->detach().to(torch::kFloat64) : torch::Tensor();
}

}  // namespace

SourceAttention SourceAttention::from(const nn::AttentionImpl& layer) {
  SourceAttention s;
  s.spec = layer.spec();
  const AttnVariant v = s.spec.variant;
  if (v != AttnVariant::kMha && v != AttnVariant::kGqa && v != AttnVariant::kMqa) {
    throw SpecError("checkpoint", "the source's attention is '" + s.spec.to_string() +
                                      "'; kvlab converts from mha, gqa or mqa");
  }
  const int64_t H = s.spec.n_heads, G = s.spec.n_groups, d = s.spec.head_dim;
  const int64_t D = s.spec.d_model;
  const auto projection = [&](const std::string& name, int64_t heads) {
    return augment(parameter(layer, name + ".weight"), parameter(layer, name + ".bias"))
        .view({heads, d, D + 1});
  };
  s.q = projection("q_proj", H);
  s.k = projection("k_proj", G);
  s.v = projection("v_proj", G);
  s.o_weight = parameter(layer, "o_proj.weight");
  s.o_bias = parameter(layer, "o_proj.bias");
  return s;
}

void LayerMoments::add(const torch::Tensor& x) {
  const torch::Tensor rows = x.detach().to(torch::kFloat64).reshape({-1, x.size(-1)});
  const torch::Tensor augmented =
      torch::cat({rows, torch::ones({rows.size(0), 1}, rows.options())}, 1);
  const torch::Tensor gram = augmented.t().matmul(augmented);  // [D+1, D+1]
  sum = sum.defined() ? sum + gram : gram;
  tokens += rows.size(0);
}

torch::Tensor augment(const torch::Tensor& weight, const torch::Tensor& bias) {
  const torch::Tensor b =
      bias.defined() ? bias.to(weight.dtype()) : torch::zeros({weight.size(0)}, weight.options());
  return torch::cat({weight, b.unsqueeze(1)}, 1);
}

torch::Tensor weight_of(const torch::Tensor& augmented) {
  return augmented.narrow(-1, 0, augmented.size(-1) - 1).contiguous();
}

torch::Tensor bias_of(const torch::Tensor& augmented) {
  return augmented.select(-1, augmented.size(-1) - 1).contiguous();
}

torch::Tensor cross_moment(const torch::Tensor& a, const torch::Tensor& c, const torch::Tensor& b) {
  return torch::matmul(torch::matmul(a, c), b.transpose(-1, -2));
}

torch::Tensor merge_groups(const torch::Tensor& per_group, int64_t n_to) {
  const int64_t n_from = per_group.size(0);
  std::vector<int64_t> shape = per_group.sizes().vec();
  shape[0] = n_from / n_to;
  shape.insert(shape.begin(), n_to);
  return per_group.reshape(shape).mean(1);
}

torch::Tensor solve_psd(const torch::Tensor& a, const torch::Tensor& b) {
  const int64_t n = a.size(-1);
  const double ridge = 1e-12 * a.diagonal(0, -2, -1).mean().item<double>() + 1e-300;
  return torch::linalg_solve(a + ridge * torch::eye(n, a.options()), b);
}

}  // namespace kvlab::convert
