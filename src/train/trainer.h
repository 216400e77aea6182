#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "data/task.h"
#include "nn/transformer.h"
#include "train/adamw.h"
#include "train/data_parallel.h"
#include "train/train_options.h"

namespace kvlab::train {

struct EvalResult {
  double loss = 0;      // mean cross-entropy per position, nats
  double accuracy = 0;  // per-position accuracy (synthetic tasks)
  double perplexity = 0;
  int64_t positions = 0;
};

EvalResult evaluate(nn::TransformerModelImpl& model, const data::Task& task, uint64_t seed,
                    int64_t batch_size);

struct TrainResult {
  enum class Status { kFinished, kInterrupted, kDiverged };
  Status status = Status::kFinished;
  int64_t step = 0;  // optimizer steps completed
  EvalResult eval;   // final evaluation (finished runs)
  double tokens_per_s = 0;
  double seconds = 0;
  std::string message;
};

// A training run in a folder: DIR/checkpoint/ (model.safetensors, config.json,
// optimizer.safetensors, trainer_state.json) and DIR/log.jsonl (one JSON record per step and
// per evaluation). Checkpoints are written to DIR/checkpoint.tmp and swapped in by rename.
class Trainer {
 public:
  Trainer(const ModelConfig& config, std::unique_ptr<data::Task> task, TrainOptions options,
          std::string run_dir);
  // Continues the run saved in `run_dir` from its newest complete checkpoint. Only the
  // writing rank (writer) settles the checkpoint folders and trims the log back to the
  // checkpoint; other ranks must call this after the writer's call returned. `data_path`, when
  // not empty, replaces a text task's recorded file (it must hold the same content).
  static std::unique_ptr<Trainer> resume(const std::string& run_dir, bool writer = true,
                                         const std::string& data_path = "");
  // A new run whose weights start from options.init_from (a checkpoint, run or Hugging Face
  // folder) instead of a seeded initialisation; the optimizer starts fresh. Throws
  // SpecError("init-from") when the model does not fit the task (kind, vocabulary, context).
  static std::unique_ptr<Trainer> from_checkpoint(std::unique_ptr<data::Task> task,
                                                  TrainOptions options, std::string run_dir);

  // Data-parallel training (not owned; must outlive run()): each rank computes its shard of
  // every global batch (rows [rank·B/W, (rank+1)·B/W)), gradients are averaged over ranks
  // before clipping and the optimizer step, so every rank takes the same step and the ranks
  // together see exactly the batches one process would. Rank 0 alone logs and checkpoints.
  // A stop request on any rank stops all of them at the same step. Throws SpecError("batch")
  // unless the world size times the accumulation divides the batch.
  void set_data_parallel(DataParallel* data_parallel);

  // Trains to options.steps. Stops early, saving a checkpoint, once *stop becomes true; stops
  // without saving when the loss is not finite. `progress` (may be empty) sees each step.
  TrainResult run(
      const std::atomic<bool>* stop,
      const std::function<void(int64_t step, double loss, double tokens_per_s)>& progress = {});

  nn::TransformerModelImpl& model() { return *model_; }
  const data::Task& task() const { return *task_; }
  const TrainOptions& options() const { return options_; }
  int64_t step() const { return step_; }
  void save_checkpoint();

 private:
  Trainer(nn::TransformerModel model, std::unique_ptr<data::Task> task, TrainOptions options,
          std::string run_dir);
  void log(const nlohmann::json& record);
  bool writer() const { return data_parallel_ == nullptr || data_parallel_->rank() == 0; }

  // The loss of one micro-batch: cross-entropy, or with a teacher the distillation mix.
  // Adds the cross-entropy alone to *cross_entropy_sum.
  torch::Tensor loss_of(const torch::Tensor& inputs, const torch::Tensor& targets,
                        double* cross_entropy_sum);

  nn::TransformerModel model_;
  nn::TransformerModel teacher_{nullptr};  // distill_from, no gradients
  std::unique_ptr<data::Task> task_;
  TrainOptions options_;
  std::string run_dir_;
  std::unique_ptr<AdamW> optimizer_;
  int64_t step_ = 0;
  DataParallel* data_parallel_ = nullptr;
};

// After a crash a run's newest complete checkpoint may sit in DIR/checkpoint.tmp or
// DIR/checkpoint.old: moves it to DIR/checkpoint and removes the other folders, keeping it
// whole at every instant. Resume calls it; so can any writer before reading a run.
void settle_checkpoints(const std::string& run_dir);

}  // namespace kvlab::train
