#pragma once
// What training and evaluating a model need in memory, estimated from above before anything is
// allocated, and the refusal (SpecError naming the flag to blame) when a machine cannot hold it.
// Every subcommand that allocates by a model's shape checks one of these first.
#include <cstdint>

#include "spec/exact.h"
#include "spec/model_config.h"

namespace kvlab {

// One training step: weights, gradients and AdamW's two moments (16 bytes a parameter),
// activations kept for the backward pass and the attention scores of every layer (B·H·T² twice:
// probabilities and their gradient). Throws std::overflow_error past 2^63.
Exact training_step_bytes(const ModelConfig& config, int64_t micro_batch, int64_t seq_len);
// Refuses a training step over this machine's memory: "seq_len" when the scores dominate (or
// overflow), "batch" otherwise.
void require_training_memory(const ModelConfig& config, int64_t micro_batch, int64_t seq_len);

// A forward pass of `batch` windows of `context` tokens without gradients (one layer's scores
// at a time): scores in f64 and the outputs (logits over the output classes) in f64.
Exact evaluation_bytes(const ModelShape& shape, int64_t batch, int64_t context);
// The same over a text, keeping logits and their log-probabilities (16 bytes a vocabulary entry).
Exact text_evaluation_bytes(const ModelShape& shape, int64_t batch, int64_t context);

}  // namespace kvlab
