#include "experiments/eval_text.h"

#include <chrono>
#include <cmath>

#include "spec/spec_error.h"

namespace kvlab {

double TextEvalResult::perplexity() const { return std::exp(mean_loss()); }

TextEvalResult evaluate_text(nn::TransformerModelImpl& model, const std::vector<int64_t>& tokens,
                             int64_t context, int64_t stride, int64_t batch,
                             const std::function<void(int64_t, int64_t)>& progress) {
  if (context < 2) throw SpecError("context", "must be >= 2, got " + std::to_string(context));
  if (stride < 1 || stride > context) {
    throw SpecError("stride", "must be in [1, context = " + std::to_string(context) + "], got " +
                                  std::to_string(stride));
  }
  if (batch < 1) throw SpecError("batch", "must be >= 1");
  const auto n = static_cast<int64_t>(tokens.size());
  if (n < 2) throw SpecError("data", "the text has " + std::to_string(n) + " tokens; need >= 2");

  // Window w covers [begin, end); it scores targets at positions [scored_from, end).
  struct Window {
    int64_t begin, end, scored_from;
  };
  std::vector<Window> windows;
  int64_t previous_end = 1;  // the first token has no prediction
  for (int64_t begin = 0;; begin += stride) {
    const int64_t end = std::min(begin + context, n);
    if (end > previous_end) windows.push_back({begin, end, std::max(previous_end, begin + 1)});
    previous_end = std::max(previous_end, end);
    if (end == n) break;
  }

  TextEvalResult result;
  result.windows = static_cast<int64_t>(windows.size());
  c10::InferenceMode inference;
  model.eval();
  const auto start = std::chrono::steady_clock::now();
  for (size_t first = 0; first < windows.size(); first += static_cast<size_t>(batch)) {
    const size_t last = std::min(windows.size(), first + static_cast<size_t>(batch));
    // Windows of one batch share a length (only the final window can be shorter): run it alone.
    for (size_t w = first; w < last;) {
      size_t group_end = w + 1;
      const int64_t length = windows[w].end - windows[w].begin;
      while (group_end < last && windows[group_end].end - windows[group_end].begin == length)
        ++group_end;
      std::vector<int64_t> flat;
      for (size_t k = w; k < group_end; ++k) {
        flat.insert(flat.end(), tokens.begin() + windows[k].begin, tokens.begin() + windows[k].end);
      }
      const auto rows = static_cast<int64_t>(group_end - w);
      const torch::Tensor input = torch::tensor(flat, torch::kInt64).view({rows, length});
      const torch::Tensor log_probs =
          torch::log_softmax(model.forward(input).to(torch::kFloat64), -1);  // [rows, length, V]
      for (size_t k = w; k < group_end; ++k) {
        const Window& win = windows[k];
        const int64_t from = win.scored_from - win.begin;  // target index within the window
        const int64_t count = win.end - win.scored_from;
        // position p predicts token p + 1: targets [from, from + count) read rows from − 1 …
        const torch::Tensor rows_lp =
            log_probs[static_cast<int64_t>(k - w)].narrow(0, from - 1, count);  // [count, V]
        const torch::Tensor targets = input[static_cast<int64_t>(k - w)].narrow(0, from, count);
        result.loss_nats -= rows_lp.gather(1, targets.unsqueeze(1)).sum().item<double>();
        result.scored_tokens += count;
      }
      w = group_end;
    }
    if (progress) progress(static_cast<int64_t>(last), result.windows);
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace kvlab
