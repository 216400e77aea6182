#include "spec/memory_estimates.h"

#include <stdexcept>
#include <string>

#include "spec/memory_budget.h"

namespace kvlab {
namespace {

Exact activation_bytes(const ModelShape& s, int64_t micro_batch, int64_t seq_len) {
  return Exact(micro_batch) * seq_len *
         (Exact(s.n_layers) * (Exact(16) * s.d_model + Exact(3) * s.mlp_width) +
          Exact(3) * s.output_classes()) *
         4;
}

Exact score_bytes(const ModelShape& s, int64_t micro_batch, int64_t seq_len) {
  return Exact(micro_batch) * s.n_heads * seq_len * seq_len * s.n_layers * 8;
}

}  // namespace

Exact training_step_bytes(const ModelConfig& config, int64_t micro_batch, int64_t seq_len) {
  return config.param_count() * 16 + activation_bytes(config.shape, micro_batch, seq_len) +
         score_bytes(config.shape, micro_batch, seq_len);
}

void require_training_memory(const ModelConfig& config, int64_t micro_batch, int64_t seq_len) {
  // the scores grow with the square of the length: --seq-len is to blame when they dominate
  // (or overflow), --batch otherwise
  std::string field = "seq_len";
  try {
    if (score_bytes(config.shape, micro_batch, seq_len).value() <=
        activation_bytes(config.shape, micro_batch, seq_len).value()) {
      field = "batch";
    }
  } catch (const std::overflow_error&) {
  }
  require_memory(field,
                 "training this model (batch " + std::to_string(micro_batch) + " × seq-len " +
                     std::to_string(seq_len) + " per micro-batch)",
                 [&] { return training_step_bytes(config, micro_batch, seq_len); });
}

Exact evaluation_bytes(const ModelShape& shape, int64_t batch, int64_t context) {
  return Exact(batch) * shape.n_heads * context * context * 8 +
         Exact(batch) * context * shape.output_classes() * 8;
}

Exact text_evaluation_bytes(const ModelShape& shape, int64_t batch, int64_t context) {
  return Exact(batch) * shape.n_heads * context * context * 8 +
         Exact(batch) * context * shape.vocab_size * 16;
}

}  // namespace kvlab
