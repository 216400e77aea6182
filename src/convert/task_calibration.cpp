#include "convert/task_calibration.h"

#include <algorithm>
#include <vector>

namespace kvlab::convert {

Calibration task_calibration(const data::Task& task, int64_t fit_tokens, int64_t held_out_windows) {
  const int64_t t = task.seq_len();
  const int64_t fit_windows = (fit_tokens + t - 1) / t;
  constexpr int64_t kBatch = 8;
  constexpr uint64_t kSeed = 0x5eed;
  std::vector<torch::Tensor> fit;
  for (int64_t step = 0; step * kBatch < fit_windows; ++step) {
    fit.push_back(task.train_batch(kSeed, step, kBatch).inputs);
  }
  std::vector<torch::Tensor> held;
  for (const data::Batch& b : task.eval_batches(kSeed, kBatch)) held.push_back(b.inputs);
  Calibration c;
  c.fit = torch::cat(fit).narrow(0, 0, fit_windows);
  const torch::Tensor all_held = torch::cat(held);
  c.held_out = all_held.narrow(0, 0, std::min(held_out_windows, all_held.size(0)));
  return c;
}

}  // namespace kvlab::convert
