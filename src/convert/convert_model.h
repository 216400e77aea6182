#pragma once

#include <torch/torch.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "convert/rotary_selection.h"
#include "nn/transformer.h"

namespace kvlab::convert {

// Tokens a conversion fits on and the held-out tokens it measures the result on, as windows
// [B, T] int64 (positions 0 .. T−1 in every window).
struct Calibration {
  torch::Tensor fit;
  torch::Tensor held_out;
};

// Relative errors of one converted layer on the held-out tokens, against the source layer
// given the same input: the attention probabilities (every head, every causal pair) and the
// layer's output, each ‖target − source‖ / ‖source‖ (Frobenius).
struct CandidateError {
  std::string method;
  double map_error = 0;
  double output_error = 0;
  std::optional<double> explained_variance;  // mla: the latent's share of the PCA's energy
};

struct LayerReport {
  int64_t layer = 0;
  std::string method;  // the candidate kept: the least output error
  std::vector<CandidateError> candidates;
  const CandidateError& kept() const;
};

struct ConversionReport {
  std::string source_attn;
  std::string target_attn;
  std::optional<RotarySelection> rotary;  // rotary targets with d_r > 0
  double rope_theta = 0;                  // of the converted model
  RopeScaling rope_scaling;
  int64_t fit_tokens = 0;
  int64_t held_out_tokens = 0;
  std::vector<LayerReport> layers;

  nlohmann::json to_json() const;
};

struct ConversionResult {
  nn::TransformerModel model{nullptr};
  ConversionReport report;
};

// The spec text a target converts to: gva and mla get dn = d_h − d_r unless the text names dn,
// so that the query·key width (and the softmax scale) stays the source's d_h; mla gets
// plainlatent (no norm on the cached latent).
std::string target_spec_text(std::string_view text, const ModelShape& shape);

// The target spec convert_model builds from `source` for `target_text`, checked as convert_model
// checks it (throws the same SpecError for a source or target it cannot convert).
AttentionSpec conversion_target(const ModelConfig& source, std::string_view target_text);

// Converts every attention layer of `source` (a decoder with mha, gqa or mqa attention) to
// `target_text`; everything outside attention is copied. Targets: mha, gqa:G, mqa (groups
// mean-pooled), q-kv, q-gqa:G, q-mqa (K=V, best of four candidates per layer), gva:G,dr and
// gta:G,dr (rotary selection and least squares), mla:dc,dr (rotary selection and a joint PCA of
// keys and values; see layer_targets.h). Throws SpecError naming
// the field for a source or target it cannot convert and for a calibration too small to fit.
// `progress` (may be empty) receives a line per stage.
ConversionResult convert_model(nn::TransformerModelImpl& source, std::string_view target_text,
                               const Calibration& calibration,
                               const std::function<void(const std::string&)>& progress = {});

}  // namespace kvlab::convert
