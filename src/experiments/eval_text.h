#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "nn/transformer.h"

namespace kvlab {

// Perplexity of a language model over one long token sequence with a sliding window, the way
// transformers' perplexity guide computes it: windows of `context` tokens advance by `stride`;
// each window scores only the tokens the previous one did not (every token after the first is
// scored once, with up to context − 1 tokens before it).
struct TextEvalResult {
  double loss_nats = 0;  // summed over the scored tokens
  int64_t scored_tokens = 0;
  int64_t windows = 0;
  double seconds = 0;  // forward passes only

  double mean_loss() const {
    return scored_tokens > 0 ? loss_nats / static_cast<double>(scored_tokens) : 0;
  }
  double perplexity() const;
};

// `progress(done, total)` is called after each batch of windows (may be empty).
TextEvalResult evaluate_text(nn::TransformerModelImpl& model, const std::vector<int64_t>& tokens,
                             int64_t context, int64_t stride, int64_t batch,
                             const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace kvlab
