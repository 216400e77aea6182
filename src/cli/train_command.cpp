#include "cli/train_command.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/interrupt.h"
#include "cli/text_tokens.h"
#include "experiments/eval_contexts.h"
#include "experiments/eval_decode.h"
#include "experiments/eval_text.h"
#include "io/atomic_file.h"
#include "io/hf_model_config.h"
#include "kernels/matvec.h"
#include "nn/checkpoint.h"
#include "nn/threads.h"
#include "report/table.h"
#include "report/units.h"
#include "spec/memory_budget.h"
#include "spec/memory_estimates.h"
#include "spec/spec_error.h"
#include "train/data_parallel.h"
#include "train/trainer.h"

namespace kvlab {
namespace {

std::string duration_text(double seconds) {
  const int64_t s = static_cast<int64_t>(seconds);
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

}  // namespace

void TrainModelFlags::add(CLI::App& app) {
  app.add_option("--layers", layers, "Transformer layers (default 2)")->group("Model");
  app.add_option("--d-model", d_model, "Model width D (default 64)")->group("Model");
  app.add_option("--heads", heads, "Query heads H (default 4)")->group("Model");
  app.add_option("--head-dim", head_dim, "Head width (default D / H)")->group("Model");
  app.add_option("--mlp", mlp, "MLP width (default 4·D)")->group("Model");
  app.add_option("--mlp-kind", mlp_kind,
                 "gelu | gelu_tanh | swiglu (default gelu; gelu_tanh: GPT-2's tanh approximation)")
      ->group("Model");
  app.add_option("--norm", norm, "layernorm | rmsnorm (default layernorm)")->group("Model");
  app.add_option("--bias", bias, "none | qkv | all (default all)")->group("Model");
  app.add_option("--pos", pos, "learned | sinusoidal | rope | none (default learned)")
      ->group("Model");
  app.add_option("--rope-theta", rope_theta, "RoPE base θ (default 10000)")->group("Model");
}

ModelShape TrainModelFlags::shape_for(const data::Task& task) const {
  ModelShape s;
  s.kind = task.model_kind();
  s.n_layers = layers.value_or(2);
  s.d_model = d_model.value_or(64);
  s.n_heads = heads.value_or(4);
  if (head_dim) {
    s.head_dim = *head_dim;
  } else if (s.n_heads > 0 && s.d_model % s.n_heads == 0) {
    s.head_dim = s.d_model / s.n_heads;
  } else {
    throw SpecError("head_dim", "--d-model " + std::to_string(s.d_model) +
                                    " is not a multiple of --heads " + std::to_string(s.n_heads) +
                                    ": give --head-dim");
  }
  s.mlp_width = mlp.value_or(4 * s.d_model);
  s.mlp_kind = mlp_kind ? parse_mlp_kind(*mlp_kind) : MlpKind::kGelu;
  s.norm = norm ? parse_norm_kind(*norm) : NormKind::kLayerNorm;
  s.bias = bias ? parse_bias_kind(*bias) : BiasKind::kAll;
  s.pos = pos ? parse_model_pos(*pos) : PosScheme::kLearned;
  if (rope_theta) s.rope_theta = *rope_theta;
  s.vocab_size = task.vocab_size();
  s.max_context = task.seq_len();
  s.tied_embeddings = false;
  task.configure_model(s);
  s.validate();
  return s;
}

CLI::App* add_train_command(CLI::App& app, TrainCommandOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "train",
      "Train a model with one attention variant on a task, from scratch or from a checkpoint "
      "(--init-from, e.g. kvlab convert's output; --distill-from a teacher); writes checkpoints "
      "and a JSON-lines log to --out. Ctrl-C saves a checkpoint; --resume continues it.");
  cmd->add_option("--task", o.task,
                  "reverse | sort | sub | swap | copy (synthetic) | text | kjv (byte-level "
                  "language modelling) | fashion-mnist (ViT) | set-anomaly (set model)")
      ->group("Task");
  cmd->add_option("--data", o.data,
                  "text: the file (last 5% held out); kjv: saved output of `bible "
                  "\"gen1:1-re22:21\"` (default: run bible); fashion-mnist, set-anomaly: the "
                  "folder (default /usr/share/datasets/fashion-mnist)")
      ->group("Task");
  cmd->add_option("--seq-len", o.seq_len, "Sequence length (default 16; text, kjv 128)")
      ->group("Task");
  cmd->add_option("--eval-sequences", o.eval_sequences,
                  "Held-out sequences (synthetic) or at most this many windows (text)")
      ->capture_default_str()
      ->group("Task");
  cmd->add_option("--attn", o.attn, "Attention spec (see 'kvlab cache --help')")
      ->capture_default_str()
      ->group("Model");
  o.model.add(*cmd);
  train::TrainOptions& t = o.train;
  cmd->add_option("--steps", t.steps, "Optimizer steps")->capture_default_str()->group("Training");
  cmd->add_option("--batch", t.batch, "Global batch (sequences per optimizer step)")
      ->capture_default_str()
      ->group("Training");
  cmd->add_option("--accum", t.accumulation, "Gradient accumulation: micro-batches per step")
      ->capture_default_str()
      ->group("Training");
  cmd->add_option("--lr", t.lr, "Peak learning rate")->capture_default_str()->group("Training");
  cmd->add_option("--lr-floor", t.lr_floor, "Cosine decays to lr × this")
      ->capture_default_str()
      ->group("Training");
  cmd->add_option("--warmup", t.warmup, "Linear warm-up steps")
      ->capture_default_str()
      ->group("Training");
  cmd->add_option("--weight-decay", t.weight_decay, "AdamW decay (not on norms and biases)")
      ->capture_default_str()
      ->group("Training");
  cmd->add_option("--beta1", t.beta1, "AdamW β1")->capture_default_str()->group("Training");
  cmd->add_option("--beta2", t.beta2, "AdamW β2")->capture_default_str()->group("Training");
  cmd->add_option("--clip", t.clip, "Gradient clipping by global norm (0: off)")
      ->capture_default_str()
      ->group("Training");
  cmd->add_option("--matmul-precision", t.matmul_precision,
                  "The linears' products: f32, or bf16 operands with f32 sums and outputs, f32 "
                  "master weights (CPUs with AVX-512 BF16 or AMX; about 1.2× the step here)")
      ->capture_default_str()
      ->group("Training");
  cmd->add_option("--eval-every", t.eval_every, "Evaluate every N steps (0: at the end)")
      ->capture_default_str()
      ->group("Training");
  cmd->add_option("--checkpoint-every", t.checkpoint_every,
                  "Checkpoint every N steps (0: at the end and on Ctrl-C)")
      ->capture_default_str()
      ->group("Training");
  cmd->add_option("--seed", t.seed, "Seed of the weights and the data streams")
      ->capture_default_str()
      ->group("Training");
  cmd->add_option(
         "--threads", o.threads,
         "Threads for libtorch's and oneDNN's OpenMP pool and OpenBLAS's (0: all cores; on "
         "2 cores as fast as kvlab launch's 2 processes of 1)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str()
      ->group("Training");
  cmd->add_option("--init-from", t.init_from,
                  "Start from this checkpoint's weights (a run, a checkpoint folder such as "
                  "kvlab convert's output, or a Hugging Face folder) instead of a random "
                  "initialisation; the model comes from it (no model flags), the task from it "
                  "unless --task is given; the optimizer starts fresh")
      ->group("Uptraining");
  cmd->add_option("--distill-from", t.distill_from,
                  "Teacher checkpoint: the loss becomes α·CE + (1 − α)·T²·KL(teacher ‖ student) "
                  "at temperature T, the teacher run without gradients on the same batches; it "
                  "must share the student's vocabulary")
      ->group("Uptraining");
  cmd->add_option("--kd-alpha", t.kd_alpha,
                  "α: the cross-entropy's weight in the distillation loss")
      ->capture_default_str()
      ->group("Uptraining");
  cmd->add_option("--kd-temperature", t.kd_temperature, "T: the softmax temperature of both models")
      ->capture_default_str()
      ->group("Uptraining");
  cmd->add_option("--out", o.out, "Run folder: checkpoint/ and log.jsonl")->group("Output");
  cmd->add_option("--resume", o.resume, "Continue the run in this folder from its checkpoint")
      ->group("Output");
  cmd->add_option("--format", o.format, "table | json (the final summary)")
      ->capture_default_str()
      ->group("Output");
  cmd->add_flag("--no-progress", o.no_progress, "No progress bar even on a terminal")
      ->group("Output");
  return cmd;
}

int run_train(const TrainCommandOptions& o, const CLI::App& command, const std::atomic<bool>* stop,
              std::ostream& out) {
  require_output_format(o.format);
  const bool threads_given = command.get_option("--threads")->count() > 0;
  int threads = nn::set_threads(o.threads);
  // torchrun / SLURM variables make this one rank of a data-parallel job (rendezvous first,
  // so a rank that cannot join fails before anything is written)
  const std::unique_ptr<train::DataParallel> data_parallel =
      train::data_parallel_from_environment();
  const bool writer = !data_parallel || data_parallel->rank() == 0;
  std::unique_ptr<train::Trainer> trainer;
  if (!o.resume.empty()) {
    for (const CLI::Option* opt : command.get_options()) {
      const std::string name = opt->get_name();
      if (opt->count() > 0 && name != "--resume" && name != "--threads" &&
          name != "--no-progress" && name != "--format" && name != "--data") {
        throw SpecError("resume", "--resume continues a run with its own settings; drop " + name);
      }
    }
    // rank 0 settles the checkpoint folders of a run cut short; the others read after it
    if (data_parallel && !writer) data_parallel->barrier();
    trainer = train::Trainer::resume(o.resume, writer, o.data);
    if (data_parallel && writer) data_parallel->barrier();
    // the same thread count as before: reductions, hence the bits, depend on it
    const int recorded = trainer->options().threads;
    if (!threads_given && recorded > 0) {
      threads = nn::set_threads(recorded);
    } else if (threads_given && recorded > 0 && threads != recorded && writer) {
      std::cerr << fmt::format(
          "kvlab train: note: the run computed with {} threads, this resume with {}: the "
          "result will not be bit for bit that of an uninterrupted run\n",
          recorded, threads);
    }
  } else {
    const bool init = !o.train.init_from.empty();
    nlohmann::json init_task;
    if (init) {
      for (const CLI::Option* opt : command.get_options()) {
        const std::string name = opt->get_name();
        if (opt->count() > 0 &&
            (name == "--attn" || name == "--layers" || name == "--d-model" || name == "--heads" ||
             name == "--head-dim" || name == "--mlp" || name == "--mlp-kind" || name == "--norm" ||
             name == "--bias" || name == "--pos" || name == "--rope-theta")) {
          throw SpecError("init-from", "the model comes from --init-from; drop " + name);
        }
      }
      const nlohmann::json init_config =
          nn::read_checkpoint_config(nn::checkpoint_dir(o.train.init_from));
      if (init_config.contains("task") && !is_hf_config(init_config))
        init_task = init_config["task"];
      if (o.task.empty() && init_task.is_null()) {
        throw SpecError("task", o.train.init_from + " records no task: give --task");
      }
      for (const char* flag : {"--seq-len", "--eval-sequences"}) {
        if (o.task.empty() && command.get_option(flag)->count() > 0) {
          throw SpecError("task", std::string(flag) + " sets up a --task; without one the task " +
                                      "comes from --init-from as it was recorded");
        }
      }
    }
    if (o.task.empty() && !init) throw SpecError("task", "give --task (or --resume DIR)");
    if (o.out.empty()) throw SpecError("out", "give --out DIR for the run's checkpoint and log");
    struct stat info {};
    if (::stat(o.out.c_str(), &info) == 0 && !S_ISDIR(info.st_mode)) {
      throw SpecError("out", "'" + o.out + "' exists and is not a folder");
    }
    std::unique_ptr<data::Task> task;
    if (o.task.empty()) {
      task = data::task_from_json(init_task, o.data);
    } else {
      data::TaskOptions task_options;
      task_options.name = o.task;
      task_options.data_path = o.data;
      task_options.seq_len = o.seq_len.value_or(o.task == "text" || o.task == "kjv" ? 128 : 16);
      task_options.eval_sequences = o.eval_sequences;
      task = data::make_task(task_options);
    }
    train::TrainOptions t = o.train;
    t.threads = threads;
    if (init) {
      trainer = train::Trainer::from_checkpoint(std::move(task), t, o.out);
      require_training_memory(trainer->model().config(),
                              o.train.batch / std::max<int64_t>(1, o.train.accumulation),
                              trainer->task().seq_len());
    } else {
      const ModelShape shape = o.model.shape_for(*task);
      ModelConfig config;
      try {
        config = ModelConfig::make(shape, o.attn, DType::kF32);
      } catch (const SpecError& e) {
        throw SpecError(e.field(), "invalid --attn \"" + o.attn + "\": " + e.what());
      }
      require_training_memory(config, o.train.batch / std::max<int64_t>(1, o.train.accumulation),
                              task->seq_len());
      trainer = std::make_unique<train::Trainer>(config, std::move(task), t, o.out);
    }
  }
  trainer->set_data_parallel(data_parallel.get());
  const std::string run_dir = o.resume.empty() ? o.out : o.resume;
  const train::TrainOptions& t = trainer->options();
  const bool bar = writer && !o.no_progress && ::isatty(STDERR_FILENO);
  const int64_t first_step = trainer->step();
  const auto start = std::chrono::steady_clock::now();
  if (writer) {
    std::cerr << fmt::format(
        "kvlab train: {} on {}, {} params, {} threads{}, steps {}..{}, run {}\n",
        trainer->model().config().attn.to_string(), trainer->task().name(),
        with_commas(trainer->model().parameter_count()), threads,
        data_parallel ? fmt::format(" × {} ranks", data_parallel->world_size()) : "", first_step,
        t.steps, run_dir);
  }
  const DeferredInterrupt saving_on_stop;  // a stop request is answered by a checkpoint
  const train::TrainResult r = trainer->run(stop, [&](int64_t step, double loss, double tps) {
    if (!bar) return;
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double eta =
        elapsed / static_cast<double>(step - first_step) * static_cast<double>(t.steps - step);
    const int width = 24;
    const int filled = static_cast<int>(width * step / t.steps);
    std::cerr << fmt::format("\r[{}{}] step {}/{} loss {:.4f} {:.0f} tok/s ETA {}   ",
                             std::string(static_cast<size_t>(filled), '#'),
                             std::string(static_cast<size_t>(width - filled), '.'), step, t.steps,
                             loss, tps, duration_text(eta))
              << std::flush;
  });
  if (bar) std::cerr << "\n";
  switch (r.status) {
    case train::TrainResult::Status::kInterrupted:
      if (writer) std::cerr << "kvlab train: " << r.message << "\n";
      return 130;
    case train::TrainResult::Status::kDiverged:
      std::cerr << "kvlab train: " << r.message << "\n";
      return 3;
    case train::TrainResult::Status::kFinished:
      break;
  }
  if (!writer) return 0;  // rank 0 reports for the job
  const bool accuracy = trainer->task().metric() == data::Metric::kAccuracy;
  if (o.format == "json") {
    out << nlohmann::json{{"task", trainer->task().name()},
                          {"attn", trainer->model().config().attn.to_string()},
                          {"steps", r.step},
                          {"eval_loss", r.eval.loss},
                          {"eval_accuracy", r.eval.accuracy},
                          {"eval_perplexity", r.eval.perplexity},
                          {"tokens_per_s", r.tokens_per_s},
                          {"seconds", r.seconds},
                          {"run", run_dir}}
               .dump(2)
        << "\n";
  } else {
    out << fmt::format(
        "{} on {}: step {}, held-out {} {:.4f} (loss {:.4f} nats), {:.0f} tokens/s, "
        "{}; checkpoint in {}/checkpoint\n",
        trainer->model().config().attn.to_string(), trainer->task().name(), r.step,
        accuracy ? "accuracy" : "perplexity", accuracy ? r.eval.accuracy : r.eval.perplexity,
        r.eval.loss, r.tokens_per_s, duration_text(r.seconds), run_dir);
  }
  return 0;
}

CLI::App* add_eval_command(CLI::App& app, EvalCommandOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "eval",
      "Evaluate a checkpoint on its task's held-out data: accuracy (synthetic and vision "
      "tasks) or loss and perplexity (text, kjv; at several lengths with --context).\n"
      "A model folder without a task (a Hugging Face folder, or `kvlab export`'s output): "
      "perplexity over the text file --data, tokenized by the folder's tokenizer.json, with a "
      "sliding window of --context tokens advancing by --stride.\n"
      "  kvlab eval --checkpoint path/to/hf-model --data book.txt --context 1024");
  cmd->add_option("--checkpoint", o.checkpoint, "Checkpoint folder (or a run folder)")->required();
  cmd->add_option("--format", o.format, "table | json")->capture_default_str();
  cmd->add_option("--threads", o.threads, "Threads (0: all cores)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  cmd->add_option("--context", o.contexts,
                  "Text tasks: perplexity at each of these context lengths, comma list "
                  "(e.g. 128,256,512; default: the training context)")
      ->delimiter(',');
  cmd->add_option("--data", o.data,
                  "The task's data file or folder, when it moved since training (its content "
                  "must be the recorded one)");
  cmd->add_option("--stride", o.stride,
                  "Model folders: tokens the window advances (default: context / 2)");
  cmd->add_option("--batch", o.batch, "Model folders: windows per forward pass")
      ->capture_default_str();
  cmd->add_flag("--allow-different-data", o.allow_different_data,
                "Evaluate on --data even when its content differs from the training data");
  cmd->add_option("--attn-precision", o.precision,
                  "Text tasks: evaluate through the decode path (token by token over a paged "
                  "cache) in f32 and in this precision (bf16: needs AVX-512 BF16; int8: q8_0/q4_0 "
                  "caches, the query rounded to q8_0 and integer dot products; auto: int8 on "
                  "q8_0/q4_0 caches, else bf16 where the CPU has it): perplexity change and greedy "
                  "agreement against f32");
  cmd->add_option("--cache-dtype", o.cache_dtype,
                  "Text tasks: evaluate through the decode path with this cache, f32 | bf16 | "
                  "f16 | q8_0 | q4_0 | fp8, against the bf16 cache: perplexity change, KL "
                  "divergence and greedy agreement (in f32 arithmetic; q8_0, q4_0, fp8: the scalar "
                  "attention kernel). With --attn-precision: the cache both precisions use "
                  "(default f32)");
  cmd->add_option("--rope-dtype", o.rope_dtype,
                  "With --cache-dtype q8_0 | q4_0 | fp8: the dtype of that cache's rope stream "
                  "(gva with dr > 0, gta, mla), f32 | bf16 | f16 | q8_0 | q4_0 | fp8 (default "
                  "bf16: a narrow key every head scores against, where quantizing saves little)");
  cmd->add_option("--weight-dtype", o.weight_dtypes,
                  "Text tasks: evaluate through the decode path with the dense layers' matrices "
                  "stored in each of these dtypes (comma list of bf16 | f16 | q8_0 | q4_0 | auto) "
                  "against f32 weights, over one cache (--cache-dtype, default f32) in f32 "
                  "arithmetic: the quality cost of the weight dtype")
      ->delimiter(',');
  cmd->add_option("--decode-batch", o.decode_batch,
                  fmt::format("With --weight-dtype, --cache-dtype or --attn-precision: held-out "
                              "windows decoded together, the sequences of one decode step "
                              "(default {}; on CPUs with AMX and AVX-512 BF16, q8_0 / q4_0 weights "
                              "are expanded to bf16 from {} / {} sequences a step and multiplied "
                              "as bf16 weights are, x rounded to bf16: the quality of each path)",
                              kDecodeEvalBatch, kAmxExpandedQ8MinRows, kAmxExpandedQ4MinRows))
      ->check(CLI::Range(int64_t{1}, int64_t{256}));
  return cmd;
}

namespace {

// Perplexity of a text checkpoint at several context lengths (experiments/eval_contexts.h).
int run_eval_contexts(const EvalCommandOptions& o, const nlohmann::json& task_record,
                      nn::TransformerModelImpl& model, std::ostream& out) {
  const ModelShape& shape = model.config().shape;
  nlohmann::json rows = nlohmann::json::array();
  Table table({"context", "loss (nats/byte)", "perplexity", "held-out bytes"});
  for (const ContextEvalRow& row :
       evaluate_at_contexts(model, task_record, o.contexts, o.data, o.allow_different_data)) {
    rows.push_back({{"context", row.context},
                    {"loss", row.loss},
                    {"perplexity", row.perplexity},
                    {"positions", row.positions}});
    table.add_row({with_commas(row.context), fmt::format("{:.4f}", row.loss),
                   fmt::format("{:.3f}", row.perplexity), with_commas(row.positions)});
  }
  if (o.format == "json") {
    out << nlohmann::json{{"attn", model.config().attn.to_string()},
                          {"task", task_record.value("name", "")},
                          {"trained_context", shape.max_context},
                          {"rows", rows}}
               .dump(2)
        << "\n";
  } else {
    out << fmt::format("{} on {} (trained at context {}):\n\n", model.config().attn.to_string(),
                       task_record.value("name", ""), shape.max_context)
        << table.to_markdown();
  }
  return 0;
}

// A Hugging Face model folder (no task): sliding-window perplexity over a text file.
int run_eval_text_file(const EvalCommandOptions& o, const std::string& dir, std::ostream& out) {
  if (o.data.empty()) {
    throw SpecError("data", dir +
                                " is a model folder without a task: give the text to evaluate "
                                "on with --data FILE");
  }
  if (!o.precision.empty()) {
    throw SpecError("attn-precision", "applies to a run's task; not yet to a model folder");
  }
  if (!o.cache_dtype.empty()) {
    throw SpecError("cache-dtype", "applies to a run's task; not yet to a model folder");
  }
  if (!o.rope_dtype.empty()) {
    throw SpecError("rope-dtype", "applies to a run's task; not yet to a model folder");
  }
  if (o.contexts.size() > 1) throw SpecError("context", "one context for a model folder");
  nn::TransformerModel model = nn::load_model(dir);
  const ModelShape& shape = model->config().shape;
  if (!shape.causal()) throw SpecError("checkpoint", dir + " is not a language model (decoder)");
  const int64_t context =
      o.contexts.empty() ? std::min<int64_t>(shape.max_context > 0 ? shape.max_context : 1024, 1024)
                         : o.contexts.front();
  if (context > shape.max_context && shape.max_context > 0) {
    throw SpecError("context", std::to_string(context) + " exceeds the model's " +
                                   std::to_string(shape.max_context) + " positions");
  }
  if (o.stride < 0) throw SpecError("stride", "must be >= 1 (or 0: context / 2)");
  if (o.batch < 1) throw SpecError("batch", "must be >= 1, got " + std::to_string(o.batch));
  const int64_t stride = o.stride > 0 ? o.stride : std::max<int64_t>(1, context / 2);
  std::string text;
  try {
    text = read_file(o.data, data::kMaxTextBytes);
  } catch (const std::runtime_error& e) {
    throw SpecError("data", e.what());
  }
  const TextTokens text_tokens = tokens_of_text(dir, shape, text);
  const std::vector<int64_t>& tokens = text_tokens.ids;
  const std::string& tokenizer_name = text_tokens.tokenizer;
  require_memory("batch",
                 "evaluating " + std::to_string(o.batch) + " windows of " +
                     std::to_string(context) + " tokens",
                 [&] { return text_evaluation_bytes(shape, o.batch, context); });
  const bool show_progress = ::isatty(2) != 0;
  const TextEvalResult r =
      evaluate_text(*model, tokens, context, stride, o.batch, [&](int64_t done, int64_t total) {
        if (show_progress)
          std::cerr << "\rkvlab eval: window " << done << "/" << total << std::flush;
      });
  if (show_progress) std::cerr << "\n";
  const double bits_per_byte = r.loss_nats / std::log(2.0) / static_cast<double>(text.size());
  const double tokens_per_s = r.seconds > 0 ? static_cast<double>(r.scored_tokens) / r.seconds : 0;
  if (o.format == "json") {
    out << nlohmann::json{{"checkpoint", dir},
                          {"attn", model->config().attn.to_string()},
                          {"data", o.data},
                          {"tokenizer", tokenizer_name},
                          {"bytes", text.size()},
                          {"tokens", tokens.size()},
                          {"scored_tokens", r.scored_tokens},
                          {"context", context},
                          {"stride", stride},
                          {"windows", r.windows},
                          {"loss", r.mean_loss()},
                          {"perplexity", r.perplexity()},
                          {"bits_per_byte", bits_per_byte},
                          {"tokens_per_s", tokens_per_s}}
               .dump(2)
        << "\n";
  } else {
    out << fmt::format(
        "{} on {}: perplexity {:.4f} (loss {:.4f} nats/token, {:.4f} bits/byte) over {} tokens "
        "({} bytes, {}); context {}, stride {}, {} windows; {:.0f} tokens/s\n",
        model->config().attn.to_string(), o.data, r.perplexity(), r.mean_loss(), bits_per_byte,
        with_commas(r.scored_tokens), with_commas(static_cast<int64_t>(text.size())),
        tokenizer_name, context, stride, r.windows, tokens_per_s);
  }
  return 0;
}

}  // namespace

int run_eval(const EvalCommandOptions& o, std::ostream& out) {
  require_output_format(o.format);
  nn::set_threads(o.threads);
  const std::string dir = nn::checkpoint_dir(o.checkpoint);
  const nlohmann::json config = nn::read_checkpoint_config(dir);
  if (is_hf_config(config)) return run_eval_text_file(o, dir, out);
  if (!config.contains("task")) throw SpecError("checkpoint", dir + "/config.json names no task");
  const auto task = data::task_from_json(config["task"], o.data, o.allow_different_data);
  nn::TransformerModel model = nn::load_model(dir);
  const uint64_t seed = config.contains("train") ? config["train"].value("seed", uint64_t{0}) : 0;
  if (!o.rope_dtype.empty() && o.cache_dtype.empty()) {
    throw SpecError("rope-dtype", "needs --cache-dtype (the cache whose rope stream it sets)");
  }
  const bool decode_path =
      !o.precision.empty() || !o.cache_dtype.empty() || !o.weight_dtypes.empty();
  if (o.decode_batch > 0 && !decode_path) {
    throw SpecError("decode-batch",
                    "applies to the decode-path evaluation (--weight-dtype, --cache-dtype or "
                    "--attn-precision)");
  }
  if (decode_path) {
    if (!o.contexts.empty()) {
      throw SpecError("context", std::string("--context and --") +
                                     (!o.weight_dtypes.empty() ? "weight-dtype"
                                      : o.precision.empty()    ? "cache-dtype"
                                                               : "attn-precision") +
                                     " exclude each other");
    }
    return run_eval_decode(o.precision, o.cache_dtype, o.rope_dtype, o.weight_dtypes, o.threads,
                           o.decode_batch > 0 ? o.decode_batch : kDecodeEvalBatch, *task, seed,
                           model, o.format, out);
  }
  if (!o.contexts.empty()) {
    if (task->metric() != data::Metric::kPerplexity) {
      throw SpecError("context",
                      "--context applies to text tasks; this checkpoint's task is " + task->name());
    }
    return run_eval_contexts(o, config["task"], *model, out);
  }
  const train::EvalResult e = train::evaluate(*model, *task, seed, 256);
  if (o.format == "json") {
    out << nlohmann::json{{"task", task->name()},       {"attn", model->config().attn.to_string()},
                          {"accuracy", e.accuracy},     {"loss", e.loss},
                          {"perplexity", e.perplexity}, {"positions", e.positions},
                          {"checkpoint", dir}}
               .dump(2)
        << "\n";
  } else if (task->metric() == data::Metric::kAccuracy) {
    out << fmt::format("{} on {}: accuracy {:.4f}, loss {:.4f} nats over {} held-out positions\n",
                       model->config().attn.to_string(), task->name(), e.accuracy, e.loss,
                       with_commas(e.positions));
  } else {
    out << fmt::format(
        "{} on text: loss {:.4f} nats/byte, perplexity {:.3f} over {} held-out "
        "bytes\n",
        model->config().attn.to_string(), e.loss, e.perplexity, with_commas(e.positions));
  }
  return 0;
}

}  // namespace kvlab
