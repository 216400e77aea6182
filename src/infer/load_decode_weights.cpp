#include "infer/load_decode_weights.h"

#include <stdexcept>
#include <string>

#include "nn/gla_attention.h"
#include "nn/gva_attention.h"
#include "nn/linear_attention.h"
#include "nn/mla_attention.h"
#include "nn/standard_attention.h"

namespace kvlab::infer {
namespace {

std::vector<float> floats(const torch::Tensor& t) {
  if (!t.defined()) return {};
  const torch::Tensor f = t.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  return std::vector<float>(f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
}

DenseWeights dense(const nn::Linear& linear) {
  DenseWeights d;
  if (!linear) return d;
  d.weight = floats(linear->weight);
  d.bias = floats(linear->bias);
  d.out = linear->weight.size(0);
  d.in = linear->weight.size(1);
  return d;
}

NormWeights norm(const nn::Norm& n) {
  NormWeights w;
  if (!n) return w;
  w.kind = n->kind;
  w.weight = floats(n->weight);
  if (n->kind == NormKind::kLayerNorm) w.bias = floats(n->bias);
  w.eps = static_cast<float>(n->eps);
  w.width = n->weight.size(0);
  return w;
}

MlpWeights mlp(const nn::DenseMlpImpl& m) {
  return {m.kind, dense(m.gate_proj), dense(m.up_proj), dense(m.down_proj)};
}

FeedForwardWeights feed_forward(nn::FeedForwardImpl& ff) {
  FeedForwardWeights w;
  if (auto* d = dynamic_cast<nn::DenseMlpImpl*>(&ff)) {
    w.dense = mlp(*d);
    return w;
  }
  auto& moe = dynamic_cast<nn::MoeMlpImpl&>(ff);
  w.router = dense(moe.gate);
  w.routing = moe.moe;
  if (moe.score_correction.defined()) w.score_correction = floats(moe.score_correction);
  for (const auto& e : *moe.experts) w.experts.push_back(mlp(*e->as<nn::DenseMlpImpl>()));
  if (moe.shared_experts) w.shared_experts.push_back(mlp(*moe.shared_experts));
  return w;
}

// The module of the family the spec names (make_attention built it from the same spec).
template <class Module>
Module& module_of(nn::AttentionImpl& attn) {
  auto* module = dynamic_cast<Module*>(&attn);
  if (module == nullptr) {
    throw std::invalid_argument("the " + std::string(attn_family_name(attn.spec().family())) +
                                " family's attention layer is not its family's module");
  }
  return *module;
}

void standard_weights(nn::StandardAttentionImpl& a, AttentionWeights& w) {
  if (a.pos_mix_weight.defined()) {
    throw std::invalid_argument("the '+' variants are non-causal and cannot decode");
  }
  w.query = dense(a.q_proj ? a.q_proj : a.qk_proj ? a.qk_proj : a.qkv_proj);
  w.key = dense(a.k_proj);
  w.value = dense(a.v_proj);
  w.content = dense(a.kv_proj);
  w.key_norm = norm(a.k_norm);
  w.query_norm = norm(a.q_norm);
  w.output = dense(a.o_proj);
}

// gva and gta (whose M_h is the fixed selection: key_maps stays empty)
void gva_weights(nn::GvaAttentionImpl& g, AttentionWeights& w) {
  w.query = dense(g.q_proj);
  w.value = dense(g.v_proj);
  w.rope_key = dense(g.r_proj);
  w.query_norm = norm(g.q_norm);
  w.key_maps = floats(g.key_maps);  // [H, d_h, d_n]
  w.output = dense(g.o_proj);
}

// mla and gla: kv_b weight [H·(d_n + d_v), d_c], per head d_n rows of W_uk then d_v rows of
// W_uv, as the decode step absorbs them.
void absorbed_up_projections(const nn::LinearImpl& kv_b_proj, AttentionWeights& w) {
  const AttentionSpec& s = w.spec;
  const torch::Tensor kv_b =
      kv_b_proj.weight.detach().view({s.n_heads, s.nope_dim + s.value_dim, s.latent_dim});
  w.key_up_t = floats(kv_b.narrow(1, 0, s.nope_dim).transpose(1, 2));  // [H, d_c, d_n]
  w.value_up = floats(kv_b.narrow(1, s.nope_dim, s.value_dim));        // [H, d_v, d_c]
  if (kv_b_proj.bias.defined()) {
    w.value_up_bias = floats(kv_b_proj.bias.detach()
                                 .view({s.n_heads, s.nope_dim + s.value_dim})
                                 .narrow(1, s.nope_dim, s.value_dim));
  }
}

void mla_weights(nn::MlaAttentionImpl& m, AttentionWeights& w) {
  w.query = dense(m.q_proj ? m.q_proj : m.q_b_proj);
  w.query_down = dense(m.q_a_proj);
  w.query_down_norm = norm(m.q_a_layernorm);
  w.latent = dense(m.kv_a_proj_with_mqa);
  w.latent_norm = norm(m.kv_a_layernorm);
  absorbed_up_projections(*m.kv_b_proj, w);
  w.output = dense(m.o_proj);
}

void gla_weights(nn::GlaAttentionImpl& m, AttentionWeights& w) {
  w.query = dense(m.q_proj);
  w.latent = dense(m.kv_a_proj);
  w.latent_norm = norm(m.kv_a_layernorm);
  absorbed_up_projections(*m.kv_b_proj, w);
  w.output = dense(m.o_proj);
}

AttentionWeights attention(nn::AttentionImpl& attn) {
  AttentionWeights w;
  w.spec = attn.spec();
  switch (w.spec.family()) {
    case AttnFamily::kStandard:
      standard_weights(module_of<nn::StandardAttentionImpl>(attn), w);
      break;
    case AttnFamily::kGva:
    case AttnFamily::kGta:
      gva_weights(module_of<nn::GvaAttentionImpl>(attn), w);
      break;
    case AttnFamily::kMla:
      mla_weights(module_of<nn::MlaAttentionImpl>(attn), w);
      break;
    case AttnFamily::kGla:
      gla_weights(module_of<nn::GlaAttentionImpl>(attn), w);
      break;
    case AttnFamily::kLinear: {
      auto& l = module_of<nn::LinearAttentionImpl>(attn);
      w.query = dense(l.qkv_proj);
      w.output = dense(l.o_proj);
      break;
    }
  }
  return w;
}

}  // namespace

DecodeWeights load_decode_weights(nn::TransformerModel& model) {
  torch::NoGradGuard no_grad;
  const ModelShape& shape = model->config().shape;
  if (!shape.causal()) throw std::invalid_argument("decoding needs a causal (decoder) model");
  DecodeWeights w;
  w.shape = shape;
  const nn::TransformerImpl& trunk = *model->model;
  w.embed_tokens = floats(trunk.embed_tokens);
  w.embed_positions = floats(trunk.embed_positions);
  for (const auto& layer : *trunk.layers) {
    auto& block = *layer->as<nn::TransformerBlockImpl>();
    BlockWeights b;
    b.input_norm = norm(block.input_layernorm);
    b.attention = attention(*block.self_attn);
    b.post_attention_norm = norm(block.post_attention_layernorm);
    b.mlp = feed_forward(*block.mlp);
    w.layers.push_back(std::move(b));
  }
  w.final_norm = norm(trunk.norm);
  if (model->lm_head) {
    w.lm_head = dense(model->lm_head);
  } else {
    w.lm_head.weight = w.embed_tokens;
    w.lm_head.out = shape.vocab_size;
    w.lm_head.in = shape.d_model;
  }
  return w;
}

}  // namespace kvlab::infer
