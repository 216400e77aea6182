#include "nn/causal_attention.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <limits>
#include <stdexcept>
#include <vector>

#include "kernels/causal_attention.h"

namespace kvlab::nn {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

CausalAttentionShape shape_of(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v) {
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) {
    throw std::invalid_argument("causal attention: q, k, v must be [B, T, heads, width]");
  }
  CausalAttentionShape s{q.size(0), q.size(1), q.size(2), k.size(2), q.size(3), v.size(3)};
  s.key_offset = k.size(1) - q.size(1);
  if (k.size(0) != s.batch || v.size(0) != s.batch || s.key_offset < 0 || v.size(1) != k.size(1) ||
      v.size(2) != s.groups || k.size(3) != s.key_dim || s.groups <= 0 || s.heads % s.groups != 0) {
    throw std::invalid_argument("causal attention: q, k, v shapes disagree");
  }
  return s;
}

struct FusedCausalAttention : public torch::autograd::Function<FusedCausalAttention> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q_in,
                               const torch::Tensor& k_in, const torch::Tensor& v_in, double scale) {
    RECORD_FUNCTION("kvlab::fused_causal_attention", std::vector<c10::IValue>());
    const torch::Tensor q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
    const CausalAttentionShape s = shape_of(q, k, v);
    if (s.key_offset != 0) {
      throw std::invalid_argument("causal attention: keys at other positions than the queries");
    }
    torch::Tensor out = torch::empty({s.batch, s.tokens, s.heads, s.value_dim}, q.options());
    torch::Tensor probs = torch::empty({s.batch, s.heads, s.tokens, s.tokens}, q.options());
    AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "fused_causal_attention", [&] {
      at::parallel_for(0, s.batch * s.heads, 1, [&](int64_t begin, int64_t end) {
        std::vector<scalar_t> scratch(static_cast<size_t>(s.forward_scratch()));
        for (int64_t item = begin; item < end; ++item) {
          causal_attention_forward(s, item / s.heads, item % s.heads, scale, q.data_ptr<scalar_t>(),
                                   k.data_ptr<scalar_t>(), v.data_ptr<scalar_t>(),
                                   out.data_ptr<scalar_t>(), probs.data_ptr<scalar_t>(),
                                   scratch.data());
        }
      });
    });
    ctx->save_for_backward({q, k, v, probs});
    ctx->saved_data["scale"] = scale;
    return out;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    RECORD_FUNCTION("kvlab::fused_causal_attention_backward", std::vector<c10::IValue>());
    const tensor_list saved = ctx->get_saved_variables();
    const torch::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &probs = saved[3];
    const double scale = ctx->saved_data["scale"].toDouble();
    const torch::Tensor dout = grads[0].contiguous();
    const CausalAttentionShape s = shape_of(q, k, v);
    torch::Tensor dq = torch::empty_like(q), dk = torch::empty_like(k), dv = torch::empty_like(v);
    AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "fused_causal_attention_backward", [&] {
      at::parallel_for(0, s.batch * s.groups, 1, [&](int64_t begin, int64_t end) {
        std::vector<scalar_t> scratch(static_cast<size_t>(s.backward_scratch()));
        for (int64_t item = begin; item < end; ++item) {
          causal_attention_backward(
              s, item / s.groups, item % s.groups, scale, q.data_ptr<scalar_t>(),
              k.data_ptr<scalar_t>(), v.data_ptr<scalar_t>(), probs.data_ptr<scalar_t>(),
              dout.data_ptr<scalar_t>(), dq.data_ptr<scalar_t>(), dk.data_ptr<scalar_t>(),
              dv.data_ptr<scalar_t>(), scratch.data());
        }
      });
    });
    return {dq, dk, dv, torch::Tensor()};
  }
};

}  // namespace

bool fused_causal_attention_supports(const torch::Tensor& q) {
  return q.device().is_cpu() &&
         (q.scalar_type() == torch::kFloat32 || q.scalar_type() == torch::kFloat64);
}

torch::Tensor fused_causal_attention(const torch::Tensor& q, const torch::Tensor& k,
                                     const torch::Tensor& v, double scale) {
  if (!fused_causal_attention_supports(q) || k.scalar_type() != q.scalar_type() ||
      v.scalar_type() != q.scalar_type()) {
    throw std::invalid_argument("fused causal attention: f32 or f64 CPU tensors of one dtype");
  }
  return FusedCausalAttention::apply(q, k, v, scale);
}

torch::Tensor fused_causal_attention_after(const torch::Tensor& q, const torch::Tensor& k,
                                           const torch::Tensor& v, double scale) {
  if (!fused_causal_attention_supports(q) || k.scalar_type() != q.scalar_type() ||
      v.scalar_type() != q.scalar_type()) {
    throw std::invalid_argument("fused causal attention: f32 or f64 CPU tensors of one dtype");
  }
  if (torch::GradMode::is_enabled() &&
      (q.requires_grad() || k.requires_grad() || v.requires_grad())) {
    throw std::invalid_argument(
        "fused causal attention after cached keys: the forward only (no gradient)");
  }
  RECORD_FUNCTION("kvlab::fused_causal_attention_after", std::vector<c10::IValue>());
  const torch::Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  CausalAttentionShape s = shape_of(qc, kc, vc);
  // no backward reads them: each task's probabilities stay in a block-sized buffer of its own
  // (at 2,048 tokens the [B, H, T, T] tensor was 134 MB a layer of fresh pages)
  s.keep_probs = false;
  torch::Tensor out = torch::empty({s.batch, s.tokens, s.heads, s.value_dim}, q.options());
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "fused_causal_attention_after", [&] {
    at::parallel_for(0, s.batch * s.heads, 1, [&](int64_t begin, int64_t end) {
      std::vector<scalar_t> scratch(static_cast<size_t>(s.forward_scratch()));
      std::vector<scalar_t> probs(static_cast<size_t>(s.item_probs()));
      for (int64_t item = begin; item < end; ++item) {
        causal_attention_forward(s, item / s.heads, item % s.heads, scale, qc.data_ptr<scalar_t>(),
                                 kc.data_ptr<scalar_t>(), vc.data_ptr<scalar_t>(),
                                 out.data_ptr<scalar_t>(), probs.data(), scratch.data());
      }
    });
  });
  return out;
}

torch::Tensor composed_causal_attention(const torch::Tensor& q, const torch::Tensor& k,
                                        const torch::Tensor& v, double scale) {
  const CausalAttentionShape s = shape_of(q, k, v);
  const int64_t per_group = s.heads / s.groups;
  // [B, T, H, d] -> [B, G, H/G, T, d]; [B, T, G, d] -> [B, G, 1, T, d]
  const torch::Tensor qg =
      q.permute({0, 2, 1, 3}).reshape({s.batch, s.groups, per_group, s.tokens, s.key_dim});
  const torch::Tensor kg = k.permute({0, 2, 1, 3}).unsqueeze(2);
  const torch::Tensor vg = v.permute({0, 2, 1, 3}).unsqueeze(2);
  const torch::Tensor scores = torch::matmul(qg, kg.transpose(-1, -2)) * scale;  // [.., T, Tk]
  const torch::Tensor masked =
      torch::ones({s.tokens, s.keys()}, q.options().dtype(torch::kBool)).triu(1 + s.key_offset);
  const torch::Tensor p =
      torch::softmax(scores.masked_fill(masked, -std::numeric_limits<double>::infinity()), -1);
  // [B, G, H/G, T, d_v] -> [B, T, H, d_v]
  return torch::matmul(p, vg)
      .permute({0, 3, 1, 2, 4})
      .reshape({s.batch, s.tokens, s.heads, s.value_dim});
}

}  // namespace kvlab::nn
