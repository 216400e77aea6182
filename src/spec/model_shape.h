#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "spec/rope_scaling.h"

namespace kvlab {

enum class ModelKind { kDecoder, kEncoder, kVit, kSet };
// kGelu is exact (x·Φ(x)); kGeluTanh is its tanh approximation (GPT-2's "gelu_new",
// torch's gelu(approximate="tanh")): checkpoints trained with one compute the other's MLP
// differently, so both are kept.
enum class MlpKind { kGelu, kSwiglu, kGeluTanh };
enum class NormKind { kLayerNorm, kRmsNorm };
// Which linear layers carry a bias: none (Llama), q/k/v projections only (Qwen2), or every
// linear layer except the LM head (GPT-2, the seeds' models).
enum class BiasKind { kNone, kQkv, kAll };
// learned: absolute position table at the input; sinusoidal: the fixed sin/cos features of
// Vaswani et al. added at the input (no parameters; seed 003's synthetic and vision models);
// rope: RoPE over the full head width;
// drope: decoupled RoPE of width d_r shared by all heads (mla, gva); none: no positions
// (sets); bias2d: the 2-D positional score bias of the "+" variants.
enum class PosScheme { kLearned, kSinusoidal, kRope, kDrope, kNone, kBias2d };

// How the router turns its logits into per-expert scores.
enum class MoeScoring { kSoftmax, kSigmoid };
// How expert groups are ranked when routing is group-limited: by their best expert
// (DeepSeek-V2's group_limited_greedy) or by the sum of their best two (V3's noaux_tc).
enum class MoeGroupScore { kMax, kTopTwoSum };

// Mixture-of-experts MLP (DeepSeek-V2/V3). n_routed_experts == 0 means a dense model.
// Routing of one token: s = scoring(router logits); the choice ranks s (+ a learned
// per-expert correction bias when score_correction: V3); with n_expert_groups > 1 only the
// experts of the best groups_per_token groups compete; the k best are chosen, weighted by
// their s (renormalised to sum 1 when normalize_top_k), times routed_scale. The shared
// experts (one MLP of n_shared_experts · expert_mlp_width) always run.
struct MoeShape {
  int64_t n_routed_experts = 0;
  int64_t n_shared_experts = 0;
  int64_t experts_per_token = 0;  // routed experts active per token
  int64_t expert_mlp_width = 0;   // intermediate width of one expert
  int64_t n_dense_layers = 0;     // first layers that keep the dense MLP
  MoeScoring scoring = MoeScoring::kSoftmax;
  bool normalize_top_k = false;
  double routed_scale = 1.0;
  int64_t n_expert_groups = 1;
  int64_t groups_per_token = 1;
  MoeGroupScore group_score = MoeGroupScore::kMax;
  bool score_correction = false;

  bool enabled() const { return n_routed_experts > 0; }
  bool operator==(const MoeShape&) const = default;
};

// Bounds far above any published model, so that every count derived from a shape or an attention
// spec fits in 63 bits and a typo cannot ask for exabytes: a field past its bound is an error
// naming it (ModelShape::validate, AttentionSpec::validate).
inline constexpr int64_t kMaxLayers = 4096;
inline constexpr int64_t kMaxWidth = int64_t{1}
                                     << 24;  // d_model, head_dim, mlp, vocab, spec widths
inline constexpr int64_t kMaxCount = int64_t{1} << 16;    // heads, groups, experts, image side
inline constexpr int64_t kMaxContext = int64_t{1} << 31;  // learned positions, a model's context

// Throws SpecError(field) when value > limit.
void require_at_most(const char* field, int64_t value, int64_t limit);

// Everything about a model except its attention variant. The attention's widths
// (d_model, n_heads, head_dim, biases, norm, positions) are taken from here when an
// AttentionSpec is built, so the two cannot disagree.
struct ModelShape {
  ModelKind kind = ModelKind::kDecoder;
  int64_t n_layers = 0;
  int64_t d_model = 0;
  int64_t n_heads = 0;
  int64_t head_dim = 0;
  int64_t mlp_width = 0;
  MlpKind mlp_kind = MlpKind::kGelu;
  MoeShape moe;
  int64_t vocab_size = 0;   // input tokens (decoder, encoder)
  int64_t n_classes = 0;    // output classes (encoder per token, vit); 0 = vocab_size
  int64_t max_context = 0;  // size of a learned position table; the model's context length
  NormKind norm = NormKind::kLayerNorm;
  double norm_eps = 1e-5;  // the blocks' and the final norm's epsilon (config.json rms_norm_eps)
  BiasKind bias = BiasKind::kAll;
  bool tied_embeddings = true;          // LM head (or per-token classifier) shares the embedding
  PosScheme pos = PosScheme::kLearned;  // the model's own: learned, sinusoidal, rope or none
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;  // rope: how the frequencies stretch past the pretrained context
  // vit: image side, square patches, channels; class-token pooling (else mean pooling)
  int64_t image_size = 0;
  int64_t patch_size = 0;
  int64_t image_channels = 0;
  bool class_token = true;
  // set: width of each input element's feature vector
  int64_t set_input_dim = 0;

  // One named starting point per kind of model kvlab builds; callers then set what differs.
  // head_dim is d_model / n_heads (0 when it does not divide: validate() names it).
  // GPT-2 style decoder: LayerNorm, GELU MLP of 4·d_model, biases on every linear layer,
  // learned positions, tied embeddings (the seeds' language models).
  static ModelShape gpt_decoder(int64_t n_layers, int64_t d_model, int64_t n_heads,
                                int64_t vocab_size, int64_t max_context);
  // Llama style decoder: RMSNorm, SwiGLU MLP of mlp_width, no biases, RoPE with base θ,
  // untied embeddings (Llama, Mistral, Qwen2, DeepSeek).
  static ModelShape llama_decoder(int64_t n_layers, int64_t d_model, int64_t n_heads,
                                  int64_t mlp_width, int64_t vocab_size, int64_t max_context,
                                  double rope_theta = 10000.0);
  // Seed 003's synthetic-task encoder: GPT-2 style blocks without the causal mask, the fixed
  // sinusoidal features of Vaswani et al. at the input, an untied per-token classifier.
  static ModelShape encoder(int64_t n_layers, int64_t d_model, int64_t n_heads, int64_t vocab_size,
                            int64_t max_context);
  // Seed 003's vision models (kind vit or set; the task fills in the input widths):
  // LayerNorm, GELU MLP of 2·d_model, biases, learned positions, untied.
  static ModelShape vision(ModelKind kind, int64_t n_layers, int64_t d_model, int64_t n_heads);

  bool causal() const { return kind == ModelKind::kDecoder; }
  int64_t output_classes() const { return n_classes > 0 ? n_classes : vocab_size; }
  int64_t n_patches() const;
  // Positions the model sees: tokens for decoder/encoder, patches (+ class token) for vit.
  int64_t n_positions() const;
  // Throws SpecError naming the first field that cannot be.
  void validate() const;
  bool operator==(const ModelShape&) const = default;
};

std::string_view model_kind_name(ModelKind kind);
std::string_view mlp_kind_name(MlpKind kind);
std::string_view norm_kind_name(NormKind kind);
std::string_view bias_kind_name(BiasKind kind);
std::string_view pos_scheme_name(PosScheme pos);
std::string_view moe_scoring_name(MoeScoring scoring);       // softmax | sigmoid
std::string_view moe_group_score_name(MoeGroupScore score);  // max | top2-sum
// Parsers throw SpecError(field) with the known values in the message.
ModelKind parse_model_kind(std::string_view text);
MlpKind parse_mlp_kind(std::string_view text);
NormKind parse_norm_kind(std::string_view text);
BiasKind parse_bias_kind(std::string_view text);
PosScheme parse_model_pos(std::string_view text);  // learned | sinusoidal | rope | none
MoeScoring parse_moe_scoring(std::string_view text);
MoeGroupScore parse_moe_group_score(std::string_view text);

}  // namespace kvlab
