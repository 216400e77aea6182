#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "spec/presets.h"

namespace kvlab {

// The model-shape flags every subcommand shares: a preset, a Hugging Face config, or a
// shape given field by field; fields given beside a preset or config override it.
struct ModelFlags {
  std::string model;
  std::string hf_config;
  std::optional<int64_t> layers, d_model, heads, head_dim, mlp, vocab, max_context, classes;
  std::optional<int64_t> image_size, patch_size, channels, set_input_dim;  // vit, set
  std::optional<std::string> mlp_kind, norm, bias, pos, model_kind;
  std::optional<double> rope_theta;
  bool tied = false;
  bool untied = false;
  bool mean_pool = false;  // vit: mean pooling instead of a class token

  // True when a flag sets a field of the shape (beside --model / --hf-config).
  bool has_shape_overrides() const;
  // True when no flag names a model: the caller picks its default.
  bool empty() const;
};

void add_model_flags(CLI::App& app, ModelFlags& flags);

// The preset, config or custom shape the flags describe, overrides applied. A custom
// shape defaults to the seeds' GPT style: GELU MLP of 4·D, LayerNorm, biases, tied
// embeddings, learned positions to 2048, vocabulary 50,304. Throws SpecError.
Preset resolve_model(const ModelFlags& flags, const std::string& fallback_preset);

}  // namespace kvlab
