#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace kvlab::train {

// A run's training options (recorded in its config.json); no libtorch, so the CLI's flag
// parsing includes this alone.
struct TrainOptions {
  int64_t steps = 1000;
  int64_t batch = 64;        // global batch per optimizer step
  int64_t accumulation = 1;  // micro-batches per step (batch must divide evenly)
  double lr = 1e-3;          // peak learning rate
  double lr_floor = 0.1;     // cosine decays to lr · lr_floor
  int64_t warmup = 50;       // linear warm-up steps
  double weight_decay = 0.01;
  double beta1 = 0.9;
  double beta2 = 0.98;
  double clip = 1.0;             // global gradient-norm clip; 0 disables
  int64_t eval_every = 0;        // 0: evaluate at the end only
  int64_t checkpoint_every = 0;  // 0: checkpoint at the end (and on SIGINT/SIGTERM) only
  int64_t eval_batch = 256;
  uint64_t seed = 0;
  int threads = 0;  // threads the run computes with (0: all cores); a resume uses the same
  // The linears' products: "f32", or "bf16" operands with f32 sums (nn::MatmulPrecision); a
  // resume uses the same.
  std::string matmul_precision = "f32";
  // Uptraining: the checkpoint the weights start from (the model's config comes from it;
  // recorded only), and a teacher whose soft targets join the loss:
  // kd_alpha·CE + (1 − kd_alpha)·T²·KL(teacher ‖ student) at temperature T = kd_temperature.
  std::string init_from;
  std::string distill_from;
  double kd_alpha = 0.5;
  double kd_temperature = 2.0;

  // Throws SpecError naming the field.
  void validate() const;
  nlohmann::json to_json() const;
  static TrainOptions from_json(const nlohmann::json& doc);
};

}  // namespace kvlab::train
