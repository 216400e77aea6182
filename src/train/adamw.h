#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

namespace kvlab::train {

// AdamW with decoupled weight decay (Loshchilov & Hutter). Decay applies to matrices and
// higher-rank weights only — never to biases, norm weights or other vectors — the rule
// nanoGPT and most LM trainers use. State is named after the parameters so it can be saved
// to and checked against a safetensors file.
class AdamW {
 public:
  struct Options {
    double beta1 = 0.9;
    double beta2 = 0.98;
    double eps = 1e-8;
    double weight_decay = 0.01;
  };

  AdamW(std::vector<std::pair<std::string, torch::Tensor>> params, Options options);

  void step(double lr);  // reads each parameter's .grad()
  void zero_grad();
  int64_t steps_taken() const { return steps_; }

  // "<param>.exp_avg", "<param>.exp_avg_sq" and "step" (I64 scalar)
  std::map<std::string, torch::Tensor> state() const;
  // Throws SafetensorsError naming a missing or misshapen tensor.
  void load_state(const std::map<std::string, torch::Tensor>& state, const std::string& what);

 private:
  struct Slot {
    std::string name;
    torch::Tensor param;
    torch::Tensor exp_avg;
    torch::Tensor exp_avg_sq;
    bool decay = false;
  };
  std::vector<Slot> slots_;
  Options options_;
  int64_t steps_ = 0;
};

// Linear warm-up from 0 to `peak` over `warmup` steps, then cosine decay to `peak · floor`
// at `total` steps. `step` counts from 0.
double learning_rate(int64_t step, int64_t total, int64_t warmup, double peak, double floor);

}  // namespace kvlab::train
