#include "spec/model_config.h"

#include "spec/attention_family.h"
#include "spec/spec_error.h"

namespace kvlab {
namespace {

using family_detail::norm_params;

bool is_moe_layer(const ModelShape& s, int64_t layer) {
  return s.moe.enabled() && layer >= s.moe.n_dense_layers;
}

// Per-token MLP MACs: every weight used once, routed experts only where active.
Exact mlp_macs_per_token(const ModelShape& s, int64_t layer) {
  const int64_t matrices = s.mlp_kind == MlpKind::kSwiglu ? 3 : 2;
  if (!is_moe_layer(s, layer)) return Exact(matrices) * s.d_model * s.mlp_width;
  const Exact active = Exact(s.moe.experts_per_token) + s.moe.n_shared_experts;
  return active * matrices * s.d_model * s.moe.expert_mlp_width +
         Exact(s.d_model) * s.moe.n_routed_experts;  // router
}

Exact head_macs_per_token(const ModelShape& s) {
  switch (s.kind) {
    case ModelKind::kDecoder:
    case ModelKind::kEncoder:
      return Exact(s.d_model) * s.output_classes();
    case ModelKind::kVit:
      return 0;  // one pooled vector per image, counted in prefill
    case ModelKind::kSet:
      return Exact(s.d_model);  // one logit per element
  }
  return 0;
}

}  // namespace

ModelConfig ModelConfig::make(const ModelShape& shape, std::string_view attn_text,
                              DType cache_dtype) {
  shape.validate();
  return ModelConfig{shape, AttentionSpec::parse(attn_text, shape, cache_dtype)};
}

Exact ModelConfig::mlp_param_count(int64_t layer) const {
  const ModelShape& s = shape;
  const bool bias = s.bias == BiasKind::kAll;
  auto one_mlp = [&](int64_t width) {
    if (s.mlp_kind == MlpKind::kSwiglu) {
      return Exact(3) * s.d_model * width + (bias ? Exact(2) * width + s.d_model : Exact(0));
    }
    return Exact(2) * s.d_model * width + (bias ? Exact(width) + s.d_model : Exact(0));
  };
  if (!is_moe_layer(s, layer)) return one_mlp(s.mlp_width);
  const Exact experts = Exact(s.moe.n_routed_experts) + s.moe.n_shared_experts;
  const Exact router =
      Exact(s.moe.n_routed_experts) * (s.d_model + (s.moe.score_correction ? 1 : 0));
  return experts * one_mlp(s.moe.expert_mlp_width) + router;
}

Exact ModelConfig::embedding_param_count() const {
  const ModelShape& s = shape;
  const bool bias = s.bias == BiasKind::kAll;
  const Exact positions =
      s.pos == PosScheme::kLearned ? Exact(s.n_positions()) * s.d_model : Exact(0);
  switch (s.kind) {
    case ModelKind::kDecoder:
    case ModelKind::kEncoder: {
      const Exact embed = Exact(s.vocab_size) * s.d_model;
      Exact head = 0;
      if (!s.tied_embeddings) {
        head = Exact(s.d_model) * s.output_classes();
        // a decoder's LM head has no bias (GPT-2, Llama); a per-token classifier does
        if (s.kind == ModelKind::kEncoder && bias) head += s.output_classes();
      }
      return embed + positions + head;
    }
    case ModelKind::kVit: {
      const Exact patch_embed = Exact(s.patch_size) * s.patch_size * s.image_channels * s.d_model +
                                (bias ? s.d_model : 0);
      const Exact cls = s.class_token ? Exact(s.d_model) : Exact(0);
      const Exact head = Exact(s.d_model) * s.n_classes + (bias ? s.n_classes : 0);
      return patch_embed + cls + positions + head;
    }
    case ModelKind::kSet:
      return Exact(s.set_input_dim) * s.d_model + (bias ? s.d_model : 0) + Exact(s.d_model) +
             (bias ? 1 : 0);
  }
  return 0;
}

Exact ModelConfig::attention_param_count() const {
  return Exact(shape.n_layers) * attn.param_count();
}

Exact ModelConfig::param_count() const {
  Exact total = embedding_param_count() + attention_param_count();
  for (int64_t layer = 0; layer < shape.n_layers; ++layer) {
    total += mlp_param_count(layer) + Exact(2) * norm_params(shape.norm, shape.d_model);
  }
  return total + norm_params(shape.norm, shape.d_model);  // final norm
}

ModelMacs ModelConfig::prefill_macs(int64_t n_tokens) const {
  if (n_tokens <= 0) throw SpecError("context", "must be > 0");
  ModelMacs macs;
  macs.attention = Exact(shape.n_layers) * attn.prefill_macs(n_tokens).total();
  Exact mlp;
  for (int64_t layer = 0; layer < shape.n_layers; ++layer) {
    mlp += Exact(n_tokens) * mlp_macs_per_token(shape, layer);
  }
  Exact edges = Exact(n_tokens) * head_macs_per_token(shape);
  if (shape.kind == ModelKind::kVit) {
    edges = Exact(n_tokens) * shape.patch_size * shape.patch_size * shape.image_channels *
                shape.d_model +
            Exact(shape.d_model) * shape.n_classes;
  }
  if (shape.kind == ModelKind::kSet) edges += Exact(n_tokens) * shape.set_input_dim * shape.d_model;
  macs.total = macs.attention + mlp + edges;
  return macs;
}

ModelMacs ModelConfig::decode_macs(int64_t context) const {
  if (context <= 0) throw SpecError("context", "must be > 0");
  ModelMacs macs;
  if (!shape.causal() || attn.cache_layout().kernel == DecodeKernel::kNone) return macs;
  macs.attention = Exact(shape.n_layers) * attn.decode_macs(context).total();
  Exact mlp;
  for (int64_t layer = 0; layer < shape.n_layers; ++layer) mlp += mlp_macs_per_token(shape, layer);
  macs.total = macs.attention + mlp + head_macs_per_token(shape);
  return macs;
}

Exact ModelConfig::cache_bytes_per_token() const {
  return Exact(shape.n_layers) * attn.cache_layout().bytes_per_token();
}

Exact ModelConfig::cache_bytes(int64_t context, int64_t batch) const {
  if (context < 0) throw SpecError("context", "must be >= 0");
  if (batch <= 0) throw SpecError("batch", "must be > 0");
  const CacheLayout layout = attn.cache_layout();
  const Exact per_sequence = Exact(context) * layout.bytes_per_token() + layout.state_bytes();
  return Exact(batch) * shape.n_layers * per_sequence;
}

}  // namespace kvlab
