#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "spec/cache_layout.h"
#include "spec/dtype.h"
#include "spec/exact.h"
#include "spec/model_shape.h"

namespace kvlab {

// The attention variants of DESIGN.md's table and their families, listed once in
// attention_families.def. A variant belongs to one family: the variants that share a module, a
// cache layout rule and a decode adapter. Every layer dispatches on the family in one table
// generated from that list (spec: spec_family(), nn: make_attention(), infer:
// load_decode_attention(), convert: target_family()); adding a variant is a line there, never a
// new bool.
enum class AttnVariant {
#define KVLAB_ATTENTION_VARIANT(Name, id, Family, groups) k##Name,
#include "spec/attention_families.def"
};

enum class AttnFamily {
#define KVLAB_ATTENTION_FAMILY(Name, id) k##Name,
#include "spec/attention_families.def"
};

// kvlab's definition of the three M_h initialisations the GVA seed names (DESIGN.md).
enum class GvaInit { kBaseline, kScaleMatched, kVarianceFixed };

std::string_view attn_variant_id(AttnVariant variant);
std::string_view attn_family_name(AttnFamily family);
// The family of the variant a spec text names (its id, before any ':' or ','), read before the
// text is parsed against a model; none for an unknown id (parse names the known ones).
std::optional<AttnFamily> attn_family_of(std::string_view text);
std::string_view gva_init_name(GvaInit init);

// MACs (multiply-accumulates) of one layer's attention. Element-wise work (softmax,
// RoPE, norms, biases) is not counted, as in the seed's profiler-based tables.
struct AttnMacs {
  Exact projections;  // every matmul of the layer's weights, per token, times tokens
  Exact mixing;       // scores and weighted sums over positions (and the '+' channel mix)
  Exact total() const { return projections + mixing; }
};

// A resolved attention variant: the variant, all of its widths and everything it needs
// from the model. Built only by parse(), which validates it; every derived number
// (cache layout, parameters, MACs) is a method below.
struct AttentionSpec {
  AttnVariant variant = AttnVariant::kMha;
  // taken from the model
  int64_t d_model = 0;
  int64_t n_heads = 0;   // H: query heads
  int64_t head_dim = 0;  // d_h
  bool causal = true;
  BiasKind bias = BiasKind::kNone;
  NormKind norm = NormKind::kRmsNorm;
  double norm_eps = 1e-5;  // the attention's own norms (latent, q/k) use the model's epsilon
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  DType cache_dtype = DType::kBf16;
  // The rope stream's dtype when it is not the default: cache_dtype for f32/bf16/f16, bf16 under
  // q8_0/q4_0/fp8 (a 16–64 wide key that every head scores against: quantizing it saves little).
  std::optional<DType> rope_cache_dtype;
  // the key stream's order in the cache's pages (spec/key_order.h): kTokenPairs for two-stream
  // bf16 caches only
  KeyOrder key_cache_order = KeyOrder::kRows;
  // the variant's own widths
  int64_t n_groups = 0;       // G: cached K/V (or C) heads
  int64_t nope_dim = 0;       // d_n: content slice of q·k (mla, gva)
  int64_t rope_dim = 0;       // d_r: decoupled RoPE slice shared by all heads (mla, gva)
  int64_t latent_dim = 0;     // d_c (mla)
  int64_t value_dim = 0;      // d_v (mla)
  int64_t q_latent_dim = 0;   // d_q: mla low-rank query, 0 = full rank
  int64_t bias_channels = 0;  // m: channels of the '+' variants' 2-D positional tensor
  PosScheme pos = PosScheme::kNone;
  bool q_norm = false;  // gva: learned RMSNorm on q^nope, per head
  bool k_norm = false;  // shared K=V with rope: K = RoPE(RMSNorm(C)), V = C (Lumma)
  // mha/gqa/mqa: per-head RMSNorm over d_h of q and of k before RoPE (Qwen3's q_norm, k_norm);
  // the cached keys are normalised and rotated
  bool qk_norm = false;
  // mla: the cached latent is W_dkv x itself, without DeepSeek's kv_a_layernorm (what kvlab
  // convert builds: a norm is not linear, so no fitted projection reproduces one)
  bool plain_latent = false;
  GvaInit m_init = GvaInit::kBaseline;

  // Text form (DESIGN.md, `kvlab cache --help`): "gqa:8", "q-gqa:4,knorm",
  // "gva:8,dr=16,init=scale-matched,qnorm", "gqa:8,qknorm", "mla:dc=512,dr=64",
  // "mla:dc=64,dr=16,plainlatent", "qk-v+:m=16", ...
  // Throws SpecError naming the field, the value and the rule.
  static AttentionSpec parse(std::string_view text, const ModelShape& model, DType cache_dtype);
  // Canonical text: parse(to_string(), same model, same dtype) == *this.
  std::string to_string() const;
  void validate() const;

  AttnFamily family() const;
  bool shares_kv() const;  // one projection (and one cached stream) is key and value
  int64_t qk_dim() const;  // width of the q·k dot product
  // The softmax scale: 1/sqrt(qk_dim), times rope_scaling.score_factor() (DeepSeek's yarn).
  double softmax_scale() const;
  int64_t attn_out_dim() const;  // width entering the output projection (H·d_h or H·d_v)

  CacheLayout cache_layout() const;
  Exact param_count() const;  // one layer
  // One layer's prefill of n tokens in the explicit (training) form, with the dense n×n
  // score map a masked implementation computes.
  AttnMacs prefill_macs(int64_t n_tokens) const;
  // One layer's decode of one token against `context` cached tokens (the new one
  // included), in the form the decode kernel runs: absorbed for gva and mla.
  AttnMacs decode_macs(int64_t context) const;

  bool operator==(const AttentionSpec&) const = default;
};

}  // namespace kvlab
