#include "spec/model_shape.h"

#include <cmath>
#include <string>

#include "spec/spec_error.h"

namespace kvlab {
namespace {

void require_positive(const char* field, int64_t value) {
  if (value <= 0) throw SpecError(field, "must be > 0, got " + std::to_string(value));
}

}  // namespace

void require_at_most(const char* field, int64_t value, int64_t limit) {
  if (value > limit) {
    throw SpecError(field, std::to_string(value) + " is above the largest value kvlab accepts (" +
                               std::to_string(limit) + ")");
  }
}

namespace {

int64_t even_head_dim(int64_t d_model, int64_t n_heads) {
  return n_heads > 0 && d_model % n_heads == 0 ? d_model / n_heads : 0;
}

}  // namespace

ModelShape ModelShape::gpt_decoder(int64_t n_layers, int64_t d_model, int64_t n_heads,
                                   int64_t vocab_size, int64_t max_context) {
  ModelShape s;
  s.kind = ModelKind::kDecoder;
  s.n_layers = n_layers;
  s.d_model = d_model;
  s.n_heads = n_heads;
  s.head_dim = even_head_dim(d_model, n_heads);
  s.mlp_width = 4 * d_model;
  s.mlp_kind = MlpKind::kGelu;
  s.vocab_size = vocab_size;
  s.max_context = max_context;
  s.norm = NormKind::kLayerNorm;
  s.bias = BiasKind::kAll;
  s.tied_embeddings = true;
  s.pos = PosScheme::kLearned;
  return s;
}

ModelShape ModelShape::llama_decoder(int64_t n_layers, int64_t d_model, int64_t n_heads,
                                     int64_t mlp_width, int64_t vocab_size, int64_t max_context,
                                     double rope_theta) {
  ModelShape s = gpt_decoder(n_layers, d_model, n_heads, vocab_size, max_context);
  s.mlp_width = mlp_width;
  s.mlp_kind = MlpKind::kSwiglu;
  s.norm = NormKind::kRmsNorm;
  s.bias = BiasKind::kNone;
  s.tied_embeddings = false;
  s.pos = PosScheme::kRope;
  s.rope_theta = rope_theta;
  return s;
}

ModelShape ModelShape::encoder(int64_t n_layers, int64_t d_model, int64_t n_heads,
                               int64_t vocab_size, int64_t max_context) {
  ModelShape s = gpt_decoder(n_layers, d_model, n_heads, vocab_size, max_context);
  s.kind = ModelKind::kEncoder;
  s.tied_embeddings = false;
  s.pos = PosScheme::kSinusoidal;
  return s;
}

ModelShape ModelShape::vision(ModelKind kind, int64_t n_layers, int64_t d_model, int64_t n_heads) {
  ModelShape s = gpt_decoder(n_layers, d_model, n_heads, /*vocab_size=*/0, /*max_context=*/0);
  s.kind = kind;
  s.mlp_width = 2 * d_model;
  s.tied_embeddings = false;
  return s;
}

int64_t ModelShape::n_patches() const {
  if (kind != ModelKind::kVit || patch_size <= 0) return 0;
  const int64_t side = image_size / patch_size;
  return side * side;
}

int64_t ModelShape::n_positions() const {
  if (kind == ModelKind::kVit) return n_patches() + (class_token ? 1 : 0);
  return max_context;
}

void ModelShape::validate() const {
  require_at_most("layers", n_layers, kMaxLayers);
  require_at_most("d_model", d_model, kMaxWidth);
  require_at_most("heads", n_heads, kMaxCount);
  require_at_most("head_dim", head_dim, kMaxWidth);
  require_at_most("mlp", mlp_width, kMaxWidth);
  require_at_most("vocab", vocab_size, kMaxWidth);
  require_at_most("classes", n_classes, kMaxWidth);
  require_at_most("context", max_context, kMaxContext);
  require_at_most("image_size", image_size, kMaxCount);
  require_at_most("patch_size", patch_size, kMaxCount);
  require_at_most("image_channels", image_channels, kMaxCount);
  require_at_most("set_input_dim", set_input_dim, kMaxWidth);
  require_at_most("moe.n_routed_experts", moe.n_routed_experts, kMaxCount);
  require_at_most("moe.n_shared_experts", moe.n_shared_experts, kMaxCount);
  require_at_most("moe.expert_mlp_width", moe.expert_mlp_width, kMaxWidth);
  require_positive("layers", n_layers);
  require_positive("d_model", d_model);
  require_positive("heads", n_heads);
  require_positive("head_dim", head_dim);
  require_positive("mlp", mlp_width);
  if (pos != PosScheme::kLearned && pos != PosScheme::kSinusoidal && pos != PosScheme::kRope &&
      pos != PosScheme::kNone) {
    throw SpecError("pos", "a model's own positions are learned, sinusoidal, rope or none, not " +
                               std::string(pos_scheme_name(pos)));
  }
  if (!(norm_eps > 0 && norm_eps < 1)) {
    throw SpecError("norm_eps", "must be in (0, 1), got " + std::to_string(norm_eps));
  }
  if (pos == PosScheme::kRope && !(rope_theta > 0 && std::isfinite(rope_theta))) {
    throw SpecError("rope_theta", "must be a finite number > 0, got " + std::to_string(rope_theta));
  }
  rope_scaling.validate();
  if (pos == PosScheme::kLearned && kind != ModelKind::kVit)
    require_positive("context", max_context);
  if (max_context < 0) throw SpecError("context", "must be >= 0");
  if (moe.enabled()) {
    require_positive("moe.experts_per_token", moe.experts_per_token);
    require_positive("moe.expert_mlp_width", moe.expert_mlp_width);
    if (moe.experts_per_token > moe.n_routed_experts) {
      throw SpecError("moe.experts_per_token",
                      std::to_string(moe.experts_per_token) + " active experts exceed the " +
                          std::to_string(moe.n_routed_experts) + " routed experts");
    }
    if (moe.n_shared_experts < 0) throw SpecError("moe.n_shared_experts", "must be >= 0");
    if (moe.n_dense_layers < 0 || moe.n_dense_layers > n_layers) {
      throw SpecError("moe.n_dense_layers", "must be in [0, layers]");
    }
    if (!(std::isfinite(moe.routed_scale) && moe.routed_scale > 0)) {
      throw SpecError("moe.routed_scale", "must be a finite number > 0");
    }
    require_positive("moe.expert_groups", moe.n_expert_groups);
    if (moe.n_routed_experts % moe.n_expert_groups != 0) {
      throw SpecError("moe.expert_groups", std::to_string(moe.n_routed_experts) +
                                               " routed experts do not split into " +
                                               std::to_string(moe.n_expert_groups) + " groups");
    }
    if (moe.groups_per_token < 1 || moe.groups_per_token > moe.n_expert_groups) {
      throw SpecError("moe.groups_per_token", "must be in [1, expert_groups]");
    }
    const int64_t group_size = moe.n_routed_experts / moe.n_expert_groups;
    if (moe.groups_per_token * group_size < moe.experts_per_token) {
      throw SpecError("moe.groups_per_token",
                      "the chosen groups hold fewer experts than experts_per_token");
    }
    if (moe.group_score == MoeGroupScore::kTopTwoSum && moe.n_expert_groups > 1 && group_size < 2) {
      throw SpecError("moe.group_score", "top2-sum needs at least two experts per group");
    }
  }
  switch (kind) {
    case ModelKind::kDecoder:
    case ModelKind::kEncoder:
      require_positive("vocab", vocab_size);
      if (n_classes < 0) throw SpecError("classes", "must be >= 0");
      if (kind == ModelKind::kDecoder && n_classes != 0 && n_classes != vocab_size) {
        throw SpecError("classes", "a decoder predicts its own vocabulary; leave classes unset");
      }
      if (tied_embeddings && output_classes() != vocab_size) {
        throw SpecError("tied_embeddings", "an output head of " + std::to_string(output_classes()) +
                                               " classes cannot share a " +
                                               std::to_string(vocab_size) + "-token embedding");
      }
      break;
    case ModelKind::kVit:
      require_positive("image_size", image_size);
      require_positive("patch_size", patch_size);
      require_positive("image_channels", image_channels);
      require_positive("classes", n_classes);
      if (image_size % patch_size != 0) {
        throw SpecError("patch_size", "image side " + std::to_string(image_size) +
                                          " is not a multiple of patch " +
                                          std::to_string(patch_size));
      }
      if (pos == PosScheme::kRope) {
        throw SpecError("pos", "vit uses learned or no positions (2-D RoPE is not implemented)");
      }
      break;
    case ModelKind::kSet:
      require_positive("set_input_dim", set_input_dim);
      if (pos != PosScheme::kNone) {
        throw SpecError("pos",
                        "a set model is permutation-equivariant: positions must be none, got " +
                            std::string(pos_scheme_name(pos)));
      }
      break;
  }
}

std::string_view model_kind_name(ModelKind kind) {
  switch (kind) {
    case ModelKind::kDecoder:
      return "decoder";
    case ModelKind::kEncoder:
      return "encoder";
    case ModelKind::kVit:
      return "vit";
    case ModelKind::kSet:
      return "set";
  }
  return "?";
}

std::string_view mlp_kind_name(MlpKind kind) {
  switch (kind) {
    case MlpKind::kGelu:
      return "gelu";
    case MlpKind::kSwiglu:
      return "swiglu";
    case MlpKind::kGeluTanh:
      return "gelu_tanh";
  }
  return "?";
}

std::string_view norm_kind_name(NormKind kind) {
  return kind == NormKind::kLayerNorm ? "layernorm" : "rmsnorm";
}

std::string_view bias_kind_name(BiasKind kind) {
  switch (kind) {
    case BiasKind::kNone:
      return "none";
    case BiasKind::kQkv:
      return "qkv";
    case BiasKind::kAll:
      return "all";
  }
  return "?";
}

std::string_view pos_scheme_name(PosScheme pos) {
  switch (pos) {
    case PosScheme::kLearned:
      return "learned";
    case PosScheme::kSinusoidal:
      return "sinusoidal";
    case PosScheme::kRope:
      return "rope";
    case PosScheme::kDrope:
      return "drope";
    case PosScheme::kNone:
      return "none";
    case PosScheme::kBias2d:
      return "bias2d";
  }
  return "?";
}

ModelKind parse_model_kind(std::string_view text) {
  for (ModelKind k : {ModelKind::kDecoder, ModelKind::kEncoder, ModelKind::kVit, ModelKind::kSet}) {
    if (text == model_kind_name(k)) return k;
  }
  throw SpecError("model_kind", "unknown model kind '" + std::string(text) +
                                    "' (known: decoder, encoder, vit, set)");
}

MlpKind parse_mlp_kind(std::string_view text) {
  if (text == "gelu") return MlpKind::kGelu;
  if (text == "swiglu") return MlpKind::kSwiglu;
  if (text == "gelu_tanh") return MlpKind::kGeluTanh;
  throw SpecError("mlp_kind",
                  "unknown MLP kind '" + std::string(text) + "' (known: gelu, gelu_tanh, swiglu)");
}

NormKind parse_norm_kind(std::string_view text) {
  if (text == "layernorm") return NormKind::kLayerNorm;
  if (text == "rmsnorm") return NormKind::kRmsNorm;
  throw SpecError("norm", "unknown norm '" + std::string(text) + "' (known: layernorm, rmsnorm)");
}

BiasKind parse_bias_kind(std::string_view text) {
  for (BiasKind b : {BiasKind::kNone, BiasKind::kQkv, BiasKind::kAll}) {
    if (text == bias_kind_name(b)) return b;
  }
  throw SpecError("bias", "unknown bias '" + std::string(text) + "' (known: none, qkv, all)");
}

std::string_view moe_scoring_name(MoeScoring scoring) {
  switch (scoring) {
    case MoeScoring::kSoftmax:
      return "softmax";
    case MoeScoring::kSigmoid:
      return "sigmoid";
  }
  return "?";
}

std::string_view moe_group_score_name(MoeGroupScore score) {
  switch (score) {
    case MoeGroupScore::kMax:
      return "max";
    case MoeGroupScore::kTopTwoSum:
      return "top2-sum";
  }
  return "?";
}

MoeScoring parse_moe_scoring(std::string_view text) {
  for (MoeScoring s : {MoeScoring::kSoftmax, MoeScoring::kSigmoid}) {
    if (text == moe_scoring_name(s)) return s;
  }
  throw SpecError("moe.scoring", "unknown '" + std::string(text) + "' (known: softmax, sigmoid)");
}

MoeGroupScore parse_moe_group_score(std::string_view text) {
  for (MoeGroupScore s : {MoeGroupScore::kMax, MoeGroupScore::kTopTwoSum}) {
    if (text == moe_group_score_name(s)) return s;
  }
  throw SpecError("moe.group_score", "unknown '" + std::string(text) + "' (known: max, top2-sum)");
}

PosScheme parse_model_pos(std::string_view text) {
  for (PosScheme p :
       {PosScheme::kLearned, PosScheme::kSinusoidal, PosScheme::kRope, PosScheme::kNone}) {
    if (text == pos_scheme_name(p)) return p;
  }
  throw SpecError("pos",
                  "unknown positional scheme '" + std::string(text) +
                      "' for a model (known: learned, sinusoidal, rope, none; drope and the 2-D "
                      "bias "
                      "come with the mla, gva and '+' attention variants)");
}

}  // namespace kvlab
