#include "nn/attention.h"

#include <stdexcept>
#include <string>

#include "nn/causal_attention.h"

namespace kvlab::nn {

std::vector<torch::Tensor> AttentionImpl::cache_rows(const torch::Tensor&, int64_t) {
  throw std::logic_error(std::string(attn_variant_id(spec_.variant)) +
                         " keeps no per-token cache rows");
}

torch::Tensor AttentionImpl::forward_from_cache(const torch::Tensor&,
                                                const std::vector<torch::Tensor>&, int64_t) {
  throw std::logic_error(std::string(attn_variant_id(spec_.variant)) + " has no cached decode");
}

AttentionImpl::DecodeQuery AttentionImpl::decode_query(const torch::Tensor&, int64_t) {
  throw std::logic_error(std::string(attn_variant_id(spec_.variant)) +
                         " does not decode with the one- or two-stream kernel");
}

torch::Tensor AttentionImpl::decode_output(const torch::Tensor&) {
  throw std::logic_error(std::string(attn_variant_id(spec_.variant)) +
                         " does not decode with the one- or two-stream kernel");
}

torch::Tensor AttentionImpl::causal_mask(int64_t tq, int64_t tk, int64_t mask_offset,
                                         const torch::Device& device) const {
  const auto opts = torch::TensorOptions().dtype(torch::kInt64).device(device);
  const torch::Tensor query_pos = torch::arange(mask_offset, mask_offset + tq, opts).view({tq, 1});
  const torch::Tensor key_pos = torch::arange(0, tk, opts).view({1, tk});
  return key_pos > query_pos;  // [Tq, Tk]
}

bool AttentionImpl::runs_fused(const torch::Tensor& q, int64_t tk, int64_t mask_offset) const {
  if (!fused_attention_ || !spec_.causal || keep_maps_ || !fused_causal_attention_supports(q)) {
    return false;
  }
  if (mask_offset == 0) return q.size(1) == tk;
  return mask_offset == tk - q.size(1) && !torch::GradMode::is_enabled();
}

torch::Tensor AttentionImpl::fused_attention(const torch::Tensor& q, const torch::Tensor& k,
                                             const torch::Tensor& v, double scale) {
  // without a gradient nothing needs the probabilities the autograd function keeps
  return torch::GradMode::is_enabled() ? fused_causal_attention(q, k, v, scale)
                                       : fused_causal_attention_after(q, k, v, scale);
}

torch::Tensor AttentionImpl::softmax_scores(torch::Tensor scores, int64_t mask_offset) const {
  if (spec_.causal) {
    const torch::Tensor mask =
        causal_mask(scores.size(-2), scores.size(-1), mask_offset, scores.device());
    scores = scores.masked_fill(mask, -std::numeric_limits<double>::infinity());
  }
  // softmax in f32 at least (DESIGN.md conventions)
  const torch::Tensor p =
      scores.scalar_type() == torch::kFloat64
          ? torch::softmax(scores, -1)
          : torch::softmax(scores.to(torch::kFloat32), -1).to(scores.scalar_type());
  if (keep_maps_) {
    last_map_ = p.detach().reshape({p.size(0), -1, p.size(-2), p.size(-1)});  // [B, H, Tq, Tk]
  }
  return p;
}

std::shared_ptr<AttentionImpl> make_attention(const AttentionSpec& spec,
                                              const torch::TensorOptions& options) {
  spec.validate();
  switch (spec.family()) {
#define KVLAB_ATTENTION_FAMILY(Name, id) \
  case AttnFamily::k##Name:              \
    return make_##id##_attention(spec, options);
#include "spec/attention_families.def"
  }
  throw std::logic_error("attention family without a module");
}

torch::Tensor split_heads(const torch::Tensor& x, int64_t n_heads) {
  return x.view({x.size(0), x.size(1), n_heads, x.size(2) / n_heads});
}

torch::Tensor group_queries(const torch::Tensor& q, int64_t n_groups) {
  const int64_t b = q.size(0), t = q.size(1), h = q.size(2), d = q.size(3);
  // [B, T, H, d] -> [B, H, T, d] -> [B, G, H/G, T, d]
  return q.permute({0, 2, 1, 3}).reshape({b, n_groups, h / n_groups, t, d});
}

torch::Tensor group_keys(const torch::Tensor& k) {
  // [B, T, G, d] -> [B, G, 1, T, d]
  return k.permute({0, 2, 1, 3}).unsqueeze(2);
}

torch::Tensor merge_grouped_heads(const torch::Tensor& out) {
  const int64_t b = out.size(0), t = out.size(3);
  // [B, G, H/G, T, d] -> [B, T, G, H/G, d] -> [B, T, H·d]
  return out.permute({0, 3, 1, 2, 4}).reshape({b, t, -1});
}

}  // namespace kvlab::nn
