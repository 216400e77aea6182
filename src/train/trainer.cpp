#include "train/trainer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "io/atomic_file.h"
#include "io/json_document.h"
#include "io/safetensors.h"
#include "nn/checkpoint.h"
#include "nn/linear_function.h"
#include "spec/spec_error.h"
#include "spec/version.h"

namespace kvlab::train {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// torch::manual_seed sets one process-wide generator: runs built on several threads at once
// (kvlab compare) take turns so each model's initial weights depend on its seed alone.
std::mutex& init_mutex() {
  static std::mutex m;
  return m;
}

bool exists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0;
}

// A checkpoint folder is complete once it holds trainer_state.json: a save writes that file
// last, and remove_checkpoint deletes it first, so a folder cut short either way is not taken.
constexpr const char* kStateFile = "/trainer_state.json";
constexpr uint64_t kMaxLogBytes = uint64_t{1} << 30;

// The step a complete checkpoint folder holds, or -1 when it is not complete or unreadable.
int64_t complete_checkpoint_step(const std::string& dir) {
  if (!exists(dir + kStateFile)) return -1;
  try {
    const json state = parse_json_document(read_file(dir + kStateFile, kMaxConfigBytes),
                                           dir + kStateFile, "resume");
    const json& step = state.at("step");
    return step.is_number_integer() && step.get<int64_t>() >= 0 ? step.get<int64_t>() : -1;
  } catch (const std::exception&) {
    return -1;
  }
}

void remove_checkpoint(const std::string& dir) {
  ::unlink((dir + kStateFile).c_str());
  fs::remove_all(dir);
}

// Makes renames in `dir` durable (a crash of the machine, not only of the process).
void sync_folder(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// The folders a run's checkpoint can be in, in the order preferred among equal steps.
std::vector<std::string> checkpoint_folders(const std::string& run_dir) {
  return {run_dir + "/checkpoint", run_dir + "/checkpoint.tmp", run_dir + "/checkpoint.old"};
}

// The newest complete checkpoint folder of a run, or "" when there is none.
std::string newest_checkpoint(const std::string& run_dir) {
  std::string best;
  int64_t best_step = -1;
  for (const std::string& dir : checkpoint_folders(run_dir)) {
    const int64_t step = complete_checkpoint_step(dir);
    if (step > best_step) {
      best = dir;
      best_step = step;
    }
  }
  return best;
}

torch::Tensor cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}),
                                              targets.reshape({-1}));
}

}  // namespace

EvalResult evaluate(nn::TransformerModelImpl& model, const data::Task& task, uint64_t seed,
                    int64_t batch_size) {
  c10::InferenceMode inference;
  double loss_sum = 0, correct = 0;
  int64_t positions = 0;
  for (const data::Batch& b : task.eval_batches(seed, batch_size)) {
    const torch::Tensor logits = model.forward(b.inputs);
    const int64_t n = b.targets.numel();
    loss_sum += cross_entropy(logits, b.targets).item<double>() * static_cast<double>(n);
    correct += (logits.argmax(-1) == b.targets).sum().item<double>();
    positions += n;
  }
  EvalResult r;
  r.positions = positions;
  r.loss = loss_sum / static_cast<double>(positions);
  r.accuracy = correct / static_cast<double>(positions);
  r.perplexity = std::exp(r.loss);
  return r;
}

Trainer::Trainer(const ModelConfig& config, std::unique_ptr<data::Task> task, TrainOptions options,
                 std::string run_dir)
    : Trainer(
          [&] {
            std::lock_guard<std::mutex> lock(init_mutex());
            torch::manual_seed(options.seed);
            return nn::TransformerModel(config, torch::kFloat32);
          }(),
          std::move(task), options, std::move(run_dir)) {
  if (exists(run_dir_ + "/checkpoint")) {
    throw SpecError("out", "'" + run_dir_ + "' already holds a run: resume it with --resume " +
                               run_dir_ + " or choose another --out");
  }
}

Trainer::Trainer(nn::TransformerModel model, std::unique_ptr<data::Task> task, TrainOptions options,
                 std::string run_dir)
    : model_(std::move(model)),
      task_(std::move(task)),
      options_(options),
      run_dir_(std::move(run_dir)) {
  options_.validate();
  model_->set_matmul_precision(nn::parse_matmul_precision(options_.matmul_precision));
  if (!options_.distill_from.empty()) {
    teacher_ = nn::load_model(nn::checkpoint_dir(options_.distill_from));
    const ModelShape& t = teacher_->config().shape;
    const ModelShape& s = model_->config().shape;
    if (t.kind != s.kind || t.output_classes() != s.output_classes() ||
        t.vocab_size != s.vocab_size) {
      throw SpecError("distill-from",
                      options_.distill_from + " predicts " + std::to_string(t.output_classes()) +
                          " classes over a vocabulary of " + std::to_string(t.vocab_size) +
                          "; the student " + std::to_string(s.output_classes()) + " over " +
                          std::to_string(s.vocab_size) + ": a teacher must share the vocabulary");
    }
    teacher_->eval();
    for (torch::Tensor& p : teacher_->parameters()) p.requires_grad_(false);
  }
  std::vector<std::pair<std::string, torch::Tensor>> params;
  for (const auto& item : model_->named_parameters()) params.emplace_back(item.key(), item.value());
  optimizer_ = std::make_unique<AdamW>(
      params, AdamW::Options{options_.beta1, options_.beta2, 1e-8, options_.weight_decay});
}

std::unique_ptr<Trainer> Trainer::from_checkpoint(std::unique_ptr<data::Task> task,
                                                  TrainOptions options, std::string run_dir) {
  if (options.init_from.empty()) throw SpecError("init-from", "no checkpoint given");
  nn::TransformerModel model = nn::load_model(nn::checkpoint_dir(options.init_from));
  const ModelShape& s = model->config().shape;
  if (s.kind != task->model_kind() || s.vocab_size != task->vocab_size()) {
    throw SpecError("init-from", options.init_from + " is a model over " +
                                     std::to_string(s.vocab_size) + " tokens; the task " +
                                     task->name() + " has " + std::to_string(task->vocab_size()));
  }
  if (s.pos == PosScheme::kLearned && task->seq_len() > s.max_context) {
    throw SpecError("init-from", options.init_from + " has " + std::to_string(s.max_context) +
                                     " learned positions; the task's windows are " +
                                     std::to_string(task->seq_len()) + " tokens");
  }
  if (exists(run_dir + "/checkpoint")) {
    throw SpecError("out", "'" + run_dir + "' already holds a run: resume it with --resume " +
                               run_dir + " or choose another --out");
  }
  return std::unique_ptr<Trainer>(
      new Trainer(std::move(model), std::move(task), std::move(options), std::move(run_dir)));
}

torch::Tensor Trainer::loss_of(const torch::Tensor& inputs, const torch::Tensor& targets,
                               double* cross_entropy_sum) {
  const torch::Tensor logits = model_->forward(inputs);
  const torch::Tensor ce = cross_entropy(logits, targets);
  *cross_entropy_sum += ce.item<double>();
  if (!teacher_) return ce;
  torch::Tensor teacher_logits;
  {
    torch::NoGradGuard no_grad;
    teacher_logits = teacher_->forward(inputs);
  }
  // KL(teacher ‖ student) at temperature T, per position; T² keeps its gradient's scale
  const double t = options_.kd_temperature;
  const torch::Tensor log_student = torch::log_softmax(logits / t, -1);
  const torch::Tensor log_teacher = torch::log_softmax(teacher_logits / t, -1);
  const torch::Tensor kl = (log_teacher.exp() * (log_teacher - log_student)).sum(-1).mean();
  return options_.kd_alpha * ce + (1 - options_.kd_alpha) * t * t * kl;
}

void Trainer::set_data_parallel(DataParallel* data_parallel) {
  if (data_parallel != nullptr &&
      options_.batch % (data_parallel->world_size() * options_.accumulation) != 0) {
    throw SpecError("batch", "the global batch " + std::to_string(options_.batch) +
                                 " does not split into " +
                                 std::to_string(data_parallel->world_size()) + " ranks × " +
                                 std::to_string(options_.accumulation) + " micro-batches");
  }
  data_parallel_ = data_parallel;
}

void settle_checkpoints(const std::string& run_dir) {
  const std::string best = newest_checkpoint(run_dir);
  if (best.empty()) return;
  const std::string final_dir = run_dir + "/checkpoint";
  // every step keeps `best` whole under one of its names: a crash here loses nothing either
  if (best != final_dir) {
    if (exists(final_dir)) remove_checkpoint(final_dir);
    fs::rename(best, final_dir);
    sync_folder(run_dir);
  }
  for (const std::string& dir : checkpoint_folders(run_dir)) {
    if (dir != final_dir && exists(dir)) remove_checkpoint(dir);
  }
}

std::unique_ptr<Trainer> Trainer::resume(const std::string& run_dir, bool writer,
                                         const std::string& data_path) {
  struct stat info {};
  if (::stat(run_dir.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    throw SpecError("resume",
                    "'" + run_dir + "' holds no resumable checkpoint (it is not a folder)");
  }
  if (writer) settle_checkpoints(run_dir);
  const std::string dir = newest_checkpoint(run_dir);
  if (dir.empty()) {
    throw SpecError("resume", "'" + run_dir + "' holds no resumable checkpoint (no complete " +
                                  run_dir + "/checkpoint with trainer_state.json)");
  }
  const json config = nn::read_checkpoint_config(dir);
  const json state =
      parse_json_document(read_file(dir + kStateFile, kMaxConfigBytes), dir + kStateFile, "resume");
  if (!config.contains("task") || !config.contains("train")) {
    throw SpecError("resume", dir + "/config.json has no task or training options");
  }
  auto trainer = std::unique_ptr<Trainer>(
      new Trainer(nn::load_model(dir), data::task_from_json(config["task"], data_path),
                  TrainOptions::from_json(config["train"]), run_dir));
  trainer->optimizer_->load_state(nn::load_tensors(dir + "/optimizer.safetensors"),
                                  dir + "/optimizer.safetensors");
  trainer->step_ = state.value("step", int64_t{-1});
  if (trainer->step_ != trainer->optimizer_->steps_taken()) {
    throw SpecError("resume", dir + ": trainer_state.json says step " +
                                  std::to_string(trainer->step_) +
                                  " but the optimizer state is at " +
                                  std::to_string(trainer->optimizer_->steps_taken()));
  }
  // the log keeps what led to this checkpoint, nothing after it
  const std::string log_path = run_dir + "/log.jsonl";
  if (writer && exists(log_path)) {
    std::istringstream lines(read_file(log_path, kMaxLogBytes));
    std::string line, kept;
    while (std::getline(lines, line)) {
      try {
        if (json::parse(line).value("step", int64_t{0}) <= trainer->step_) kept += line + "\n";
      } catch (const json::exception&) {
        // a line cut short by the interruption
      }
    }
    write_file_atomic(log_path, kept);
  }
  return trainer;
}

void Trainer::log(const json& record) {
  if (!writer()) return;
  std::ofstream out(run_dir_ + "/log.jsonl", std::ios::app);
  out << record.dump() << "\n";
}

void Trainer::save_checkpoint() {
  if (!writer()) return;
  fs::create_directories(run_dir_);
  const std::string final_dir = run_dir_ + "/checkpoint";
  const std::string temp_dir = run_dir_ + "/checkpoint.tmp";
  const std::string old_dir = run_dir_ + "/checkpoint.old";
  // The run's newest complete checkpoint is final_dir (a previous save, or resume's
  // settle_checkpoints); temp_dir and old_dir hold nothing else that is needed. At every
  // instant below, a complete checkpoint exists under one of the three names.
  remove_checkpoint(temp_dir);
  const json extra = {{"task", task_->to_json()}, {"train", options_.to_json()}};
  nn::save_model(*model_, temp_dir, extra);
  nn::save_tensors(temp_dir + "/optimizer.safetensors", optimizer_->state());
  write_file_atomic(temp_dir + kStateFile,
                    json{{"step", step_}, {"kvlab_version", kVersion}}.dump(2) + "\n");
  sync_folder(temp_dir);
  remove_checkpoint(old_dir);
  if (exists(final_dir)) fs::rename(final_dir, old_dir);
  fs::rename(temp_dir, final_dir);
  sync_folder(run_dir_);
  remove_checkpoint(old_dir);
}

TrainResult Trainer::run(const std::atomic<bool>* stop,
                         const std::function<void(int64_t, double, double)>& progress) {
  if (writer()) fs::create_directories(run_dir_);
  TrainResult result;
  const auto start = std::chrono::steady_clock::now();
  const int64_t world = data_parallel_ ? data_parallel_->world_size() : 1;
  const int64_t rank = data_parallel_ ? data_parallel_->rank() : 0;
  const int64_t shard = options_.batch / world;  // this rank's rows of every global batch
  const int64_t micro = shard / options_.accumulation;
  std::vector<torch::Tensor> params = model_->parameters();
  if (data_parallel_) data_parallel_->broadcast(params);  // one start for all, even if resumed
  int64_t tokens = 0;
  double compute_seconds = 0;
  while (step_ < options_.steps) {
    bool stopping = stop != nullptr && stop->load();
    const auto step_start = std::chrono::steady_clock::now();
    double loss_value = 0;
    double ce_value = 0;  // the cross-entropy part, summed over micro-batches
    int64_t batch_tokens = 0;
    if (!stopping || data_parallel_) {
      const data::Batch batch = task_->train_batch(options_.seed, step_, options_.batch);
      batch_tokens = batch.targets.numel();
      optimizer_->zero_grad();
      for (int64_t k = 0; k < options_.accumulation; ++k) {
        const torch::Tensor inputs = batch.inputs.narrow(0, rank * shard + k * micro, micro);
        const torch::Tensor targets = batch.targets.narrow(0, rank * shard + k * micro, micro);
        // each micro-batch's mean weighs 1/accumulation: the sum is the shard's mean
        const torch::Tensor loss =
            loss_of(inputs, targets, &ce_value) / static_cast<double>(options_.accumulation);
        loss_value += loss.item<double>();
        loss.backward();
      }
    }
    if (data_parallel_) {
      // one small collective carries the loss and every rank's stop request, so all ranks
      // agree to stop at the same step; then the gradients, averaged in buckets
      const std::vector<double> sums = data_parallel_->sum({loss_value, stopping ? 1.0 : 0.0});
      loss_value = sums[0] / static_cast<double>(world);
      stopping = sums[1] > 0;
      if (!stopping && std::isfinite(loss_value)) data_parallel_->average_gradients(params);
    }
    if (stopping) {
      save_checkpoint();
      result.status = TrainResult::Status::kInterrupted;
      result.message = "stopped at step " + std::to_string(step_) + "; checkpoint saved in " +
                       run_dir_ + "/checkpoint (resume with --resume " + run_dir_ + ")";
      break;
    }
    if (!std::isfinite(loss_value)) {
      result.status = TrainResult::Status::kDiverged;
      result.message = "the loss became " + std::to_string(loss_value) + " at step " +
                       std::to_string(step_) +
                       "; stopped without saving (the last good "
                       "checkpoint, if any, is kept in " +
                       run_dir_ + "/checkpoint)";
      log({{"step", step_}, {"loss", nullptr}, {"error", "non-finite loss"}});
      break;
    }
    double grad_norm = 0;
    if (options_.clip > 0) {
      grad_norm = torch::nn::utils::clip_grad_norm_(params, options_.clip);
    }
    const double lr =
        learning_rate(step_, options_.steps, options_.warmup, options_.lr, options_.lr_floor);
    optimizer_->step(lr);
    ++step_;
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
    tokens += batch_tokens;  // the global batch: every rank's shard
    compute_seconds += seconds;
    const double tokens_per_s = static_cast<double>(batch_tokens) / seconds;
    json record = {{"step", step_},
                   {"loss", loss_value},
                   {"lr", lr},
                   {"grad_norm", grad_norm},
                   {"tokens_per_s", tokens_per_s}};
    // distilling, the loss mixes in the KL term: the cross-entropy alone (this rank's shard)
    if (teacher_) record["ce"] = ce_value / static_cast<double>(options_.accumulation);
    log(record);
    if (progress) progress(step_, loss_value, tokens_per_s);
    if (writer() && options_.eval_every > 0 && step_ % options_.eval_every == 0 &&
        step_ < options_.steps) {
      const EvalResult e = evaluate(*model_, *task_, options_.seed, options_.eval_batch);
      log({{"step", step_},
           {"eval_loss", e.loss},
           {"eval_accuracy", e.accuracy},
           {"eval_perplexity", e.perplexity}});
    }
    if (options_.checkpoint_every > 0 && step_ % options_.checkpoint_every == 0) save_checkpoint();
  }
  if (result.status == TrainResult::Status::kFinished && writer()) {
    result.eval = evaluate(*model_, *task_, options_.seed, options_.eval_batch);
    log({{"step", step_},
         {"eval_loss", result.eval.loss},
         {"eval_accuracy", result.eval.accuracy},
         {"eval_perplexity", result.eval.perplexity},
         {"final", true}});
    save_checkpoint();
  }
  result.step = step_;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.tokens_per_s = compute_seconds > 0 ? static_cast<double>(tokens) / compute_seconds : 0;
  return result;
}

}  // namespace kvlab::train
