#include "cli/model_flags.h"

#include "io/hf_config.h"
#include "spec/spec_error.h"

namespace kvlab {

bool ModelFlags::has_shape_overrides() const {
  return layers || d_model || heads || head_dim || mlp || vocab || max_context || classes ||
         image_size || patch_size || channels || set_input_dim || mlp_kind || norm || bias || pos ||
         model_kind || rope_theta || tied || untied || mean_pool;
}

bool ModelFlags::empty() const {
  return model.empty() && hf_config.empty() && !has_shape_overrides();
}

void add_model_flags(CLI::App& app, ModelFlags& f) {
  std::string names;
  for (const Preset& p : presets()) names += (names.empty() ? "" : ", ") + p.name;
  auto* model = app.add_option("--model", f.model, "Model preset: " + names)->group("Model");
  auto* hf = app.add_option("--hf-config", f.hf_config,
                            "Hugging Face config.json (Llama, Mistral, Qwen2, DeepSeek-V2/V3)")
                 ->group("Model");
  model->excludes(hf);
  app.add_option("--layers", f.layers, "Transformer layers")->group("Model");
  app.add_option("--d-model", f.d_model, "Model width D")->group("Model");
  app.add_option("--heads", f.heads, "Query heads H")->group("Model");
  app.add_option("--head-dim", f.head_dim, "Head width d_h (default D / H)")->group("Model");
  app.add_option("--mlp", f.mlp, "MLP hidden width (default 4·D)")->group("Model");
  app.add_option("--mlp-kind", f.mlp_kind,
                 "gelu | gelu_tanh | swiglu (default gelu; gelu_tanh: GPT-2's tanh approximation)")
      ->group("Model");
  app.add_option("--vocab", f.vocab, "Vocabulary size (default 50304)")->group("Model");
  app.add_option("--max-context", f.max_context,
                 "Model context length: size of a learned position table (default 2048)")
      ->group("Model");
  app.add_option("--classes", f.classes, "Output classes (encoder, vit)")->group("Model");
  app.add_option("--norm", f.norm, "layernorm | rmsnorm (default layernorm)")->group("Model");
  app.add_option("--bias", f.bias, "none | qkv | all (default all)")->group("Model");
  app.add_option("--pos", f.pos, "learned | sinusoidal | rope | none (default learned)")
      ->group("Model");
  app.add_option("--rope-theta", f.rope_theta, "RoPE base θ (default 10000)")->group("Model");
  app.add_option("--model-kind", f.model_kind, "decoder | encoder | vit | set (default decoder)")
      ->group("Model");
  app.add_option("--image-size", f.image_size, "vit: image side in pixels")->group("Model");
  app.add_option("--patch-size", f.patch_size, "vit: square patch side")->group("Model");
  app.add_option("--channels", f.channels, "vit: image channels")->group("Model");
  app.add_flag("--mean-pool", f.mean_pool, "vit: mean pooling instead of a class token")
      ->group("Model");
  app.add_option("--set-input-dim", f.set_input_dim, "set: features per element")->group("Model");
  auto* tied = app.add_flag("--tied", f.tied, "Output head shares the embedding")->group("Model");
  auto* untied = app.add_flag("--untied", f.untied, "Separate output head")->group("Model");
  tied->excludes(untied);
}

Preset resolve_model(const ModelFlags& f, const std::string& fallback_preset) {
  Preset out;
  if (!f.model.empty()) {
    out = find_preset(f.model);
  } else if (!f.hf_config.empty()) {
    out = read_hf_config(f.hf_config);
  } else if (f.layers || f.d_model || f.heads) {
    if (!f.layers || !f.d_model || !f.heads) {
      throw SpecError("model",
                      "a custom shape needs --layers, --d-model and --heads "
                      "(or use --model NAME / --hf-config FILE)");
    }
    ModelShape& s = out.shape;
    s.kind = ModelKind::kDecoder;
    s.n_layers = *f.layers;
    s.d_model = *f.d_model;
    s.n_heads = *f.heads;
    if (!f.head_dim && s.n_heads > 0 && s.d_model % s.n_heads != 0) {
      throw SpecError("head_dim", "--d-model " + std::to_string(s.d_model) +
                                      " is not a multiple of --heads " + std::to_string(s.n_heads) +
                                      ": give --head-dim");
    }
    s.head_dim = s.n_heads > 0 ? s.d_model / s.n_heads : 0;
    s.mlp_width = 4 * s.d_model;
    s.mlp_kind = MlpKind::kGelu;
    s.vocab_size = 50304;
    s.max_context = 2048;
    s.norm = NormKind::kLayerNorm;
    s.bias = BiasKind::kAll;
    s.tied_embeddings = true;
    s.pos = PosScheme::kLearned;
    out.name = "custom";
    out.description = "custom shape";
    out.attn = "mha";
  } else {
    out = find_preset(fallback_preset);
  }

  ModelShape& s = out.shape;
  if (f.layers) s.n_layers = *f.layers;
  if (f.d_model) s.d_model = *f.d_model;
  if (f.heads) s.n_heads = *f.heads;
  if (f.head_dim) s.head_dim = *f.head_dim;
  if (f.mlp) s.mlp_width = *f.mlp;
  if (f.vocab) s.vocab_size = *f.vocab;
  if (f.max_context) s.max_context = *f.max_context;
  if (f.classes) s.n_classes = *f.classes;
  if (f.image_size) s.image_size = *f.image_size;
  if (f.patch_size) s.patch_size = *f.patch_size;
  if (f.channels) s.image_channels = *f.channels;
  if (f.set_input_dim) s.set_input_dim = *f.set_input_dim;
  if (f.mean_pool) s.class_token = false;
  if (f.mlp_kind) s.mlp_kind = parse_mlp_kind(*f.mlp_kind);
  if (f.norm) s.norm = parse_norm_kind(*f.norm);
  if (f.bias) s.bias = parse_bias_kind(*f.bias);
  if (f.pos) s.pos = parse_model_pos(*f.pos);
  if (f.rope_theta) s.rope_theta = *f.rope_theta;
  if (f.model_kind) s.kind = parse_model_kind(*f.model_kind);
  if (f.tied) s.tied_embeddings = true;
  if (f.untied) s.tied_embeddings = false;
  if (f.has_shape_overrides() && out.name != "custom") out.description += " (with flag overrides)";
  s.validate();
  return out;
}

}  // namespace kvlab
