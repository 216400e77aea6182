#include "experiments/bench.h"

#include <ATen/record_function.h>
#include <fmt/format.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <thread>

#include "experiments/bench_model.h"
#include "experiments/op_profile.h"
#include "experiments/source_dir.h"
#include "io/json_document.h"
#include "kernels/compute_peak.h"
#include "kernels/gemm.h"
#include "kernels/memory_bandwidth.h"
#include "kernels/process_memory.h"
#include "kernels/thread_pool.h"
#include "nn/threads.h"
#include "nn/transformer.h"
#include "report/statistics.h"
#include "report/table.h"
#include "report/units.h"
#include "spec/attention_family.h"
#include "spec/memory_budget.h"
#include "spec/memory_estimates.h"
#include "spec/spec_error.h"
#include "train/adamw.h"
#include "train/trainer.h"

namespace kvlab {

namespace {

// Peak resident memory since the last reset, in bytes (Linux: VmHWM, reset through
// /proc/self/clear_refs); -1 where the kernel does not allow the reset.
bool reset_peak_memory() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
  return static_cast<bool>(clear);
}

int64_t peak_memory_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

}  // namespace

ModelConfig bench_model(const BenchModelOptions& b, const std::string& attn, int64_t context) {
  if (b.heads <= 0 || b.d_model % b.heads != 0) {
    throw SpecError("heads", "--d-model must be a multiple of --heads");
  }
  ModelShape s =
      ModelShape::llama_decoder(b.layers, b.d_model, b.heads,
                                /*mlp_width=*/4 * b.d_model, /*vocab_size=*/256, context);
  // linear attention keeps no RoPE inside its running state: it takes no positions
  const std::optional<AttnFamily> family = attn_family_of(attn);
  s.pos = family && !spec_family(*family).takes_rope() ? PosScheme::kNone : PosScheme::kRope;
  s.tied_embeddings = true;
  s.validate();  // a shape error names its own flag, not --attn
  try {
    return ModelConfig::make(s, attn, DType::kF32);
  } catch (const SpecError& e) {
    throw SpecError(e.field(), "invalid --attn \"" + attn + "\": " + e.what());
  }
}

int run_bench_prefill(const BenchModelOptions& b, std::ostream& out) {
  require_output_format(b.format);
  if (b.attn.empty()) throw SpecError("attn", "give at least one --attn");
  const int threads = nn::set_threads(b.threads);
  int64_t longest = 0;
  for (int64_t l : b.length) {
    if (l <= 0) throw SpecError("length", "must be > 0");
    longest = std::max(longest, l);
  }
  for (int64_t batch : b.batch) {
    if (batch <= 0) throw SpecError("batch", "must be > 0");
  }
  nlohmann::json rows = nlohmann::json::array();
  Table table({"attn", "batch", "length", "tokens/s", "ms/forward", "peak memory"});
  for (const std::string& attn : b.attn) {
    const ModelConfig config = bench_model(b, attn, longest);
    for (int64_t batch : b.batch) {
      // one layer's activations and attention scores at a time (inference mode)
      require_memory(
          "length",
          "a forward of batch " + std::to_string(batch) + " × length " + std::to_string(longest),
          [&] {
            return Exact(batch) * config.shape.n_heads * longest * longest * 8 +
                   Exact(batch) * longest * (Exact(16) * b.d_model + 256) * 4 +
                   config.param_count() * 4;
          });
    }
    torch::manual_seed(0);
    nn::TransformerModel model(config, torch::kFloat32);
    for (int64_t batch : b.batch) {
      for (int64_t length : b.length) {
        c10::InferenceMode guard;
        const torch::Tensor tokens = torch::randint(0, 256, {batch, length});
        model->forward(tokens.narrow(1, 0, std::min<int64_t>(length, 16)));  // warm-up
        const bool reset = reset_peak_memory();
        std::vector<double> seconds;
        for (int r = 0; r < 3; ++r) {
          const auto start = std::chrono::steady_clock::now();
          (void)model->forward(tokens).sum().item<float>();
          seconds.push_back(
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        }
        const double median = median_of(seconds);
        const int64_t peak = reset ? peak_memory_bytes() : -1;
        const double tps = static_cast<double>(batch * length) / median;
        rows.push_back({{"attn", config.attn.to_string()},
                        {"batch", batch},
                        {"length", length},
                        {"tokens_per_s", tps},
                        {"ms_per_forward", 1e3 * median},
                        {"peak_memory_bytes", peak},
                        {"threads", threads}});
        table.add_row({config.attn.to_string(), std::to_string(batch), std::to_string(length),
                       fmt::format("{:.0f}", tps), fmt::format("{:.1f}", 1e3 * median),
                       peak < 0 ? "n/a" : format_bytes(peak, ByteUnits::kIec)});
      }
    }
  }
  if (b.format == "json") {
    out << nlohmann::json{{"rows", rows}}.dump(2) << "\n";
  } else {
    out << fmt::format(
               "bench prefill: {} layers, D {}, {} heads, byte vocabulary, {} threads; "
               "median of 3 forwards; peak = process resident high-water mark\n\n",
               b.layers, b.d_model, b.heads, threads)
        << table.to_markdown();
  }
  return 0;
}

int run_bench_memory(const BenchMemoryOptions& m, std::ostream& out) {
  if (m.mib < 1) throw SpecError("mib", "must be >= 1");
  if (m.repeats < 1) throw SpecError("repeats", "must be >= 1");
  require_output_format(m.format);
  const int threads = m.threads > 0
                          ? m.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (!probe_takes_streams(m.streams)) throw SpecError("streams", "must be 0, 1, 2, 4 or 8");
  const BandwidthResult r = measure_read_bandwidth(m.mib << 20, threads, m.repeats, m.streams);
  if (m.format == "json") {
    out << nlohmann::json{{"bytes", r.bytes},
                          {"threads", r.threads},
                          {"streams", r.streams},
                          {"prefetch_bytes", r.prefetch_bytes},
                          {"gb_per_s_median", r.median()},
                          {"gb_per_s_min", r.min()},
                          {"gb_per_s_max", r.max()},
                          {"gb_per_s", r.gb_per_s}}
               .dump(2)
        << "\n";
  } else {
    out << fmt::format(
        "read bandwidth: {:.2f} GB/s median (min {:.2f}, max {:.2f}; {} passes over "
        "{} MiB, {} threads, {} streams each{}{}; GB = 10^9 B)\n",
        r.median(), r.min(), r.max(), r.gb_per_s.size(), m.mib, r.threads, r.streams,
        r.prefetch_bytes > 0 ? fmt::format(", each line prefetched {} B ahead", r.prefetch_bytes)
                             : "",
        m.streams == kCeilingStreams
            ? fmt::format(", the fastest of 1 stream, 4, and 4 prefetched {} B ahead",
                          kProbeAheadBytes)
            : "");
  }
  return 0;
}

int run_bench_compute(const BenchComputeOptions& c, std::ostream& out) {
  require_output_format(c.format);
  ThreadPool pool(c.threads);
  nlohmann::json rows = nlohmann::json::array();
  Table table({"precision", "instruction", "G multiply-adds/s", "min–max", "per thread", "vs f32"});
  double f32 = 0;
  for (MacKind kind : {MacKind::kF32, MacKind::kBf16, MacKind::kInt8, MacKind::kInt8Blocks,
                       MacKind::kBf16Loaded}) {
    const std::optional<ComputePeak> peak = measure_compute_peak(kind, pool, c.repeats);
    const std::string name(mac_kind_name(kind));
    if (!peak) {
      rows.push_back({{"precision", name}, {"instruction", nullptr}, {"gmacs_median", nullptr}});
      table.add_row({name, "none on this CPU", "-", "-", "-", "-"});
      continue;
    }
    if (kind == MacKind::kF32) f32 = peak->median();
    rows.push_back({{"precision", name},
                    {"instruction", std::string(peak->isa)},
                    {"gmacs_median", peak->median()},
                    {"gmacs_min", peak->min()},
                    {"gmacs_max", peak->max()},
                    {"gmacs", peak->gmacs}});
    table.add_row({name, std::string(peak->isa), fmt::format("{:.1f}", peak->median()),
                   fmt::format("{:.1f}–{:.1f}", peak->min(), peak->max()),
                   fmt::format("{:.1f}", peak->median() / pool.size()),
                   f32 > 0 ? fmt::format("{:.2f}", peak->median() / f32) : "-"});
  }
  if (c.format == "json") {
    out << nlohmann::json{{"cpu", cpu_model_name()}, {"threads", pool.size()}, {"peaks", rows}}
               .dump(2)
        << "\n";
    return 0;
  }
  out << fmt::format(
      "bench compute: {}, {} threads; register loops of independent multiply-add chains (no "
      "memory traffic; bf16 tiles loaded: the tile loop with its operand tiles loaded from L1 "
      "every four multiplies), {} timed passes each after one warm-up, medians; G = 10^9 "
      "multiply-adds per second (one FMA lane, or one product of a dot-product instruction)\n\n",
      cpu_model_name(), pool.size(), c.repeats);
  out << table.to_markdown();
  return 0;
}

namespace {

// The ops with the most self time (and every phase scope), as bench train prints them.
constexpr size_t kProfileRows = 25;
// The step's phases are profiler scopes named with this prefix.
constexpr std::string_view kPhase = "phase: ";

bool is_phase(const std::string& name) { return name.rfind(kPhase, 0) == 0; }

nlohmann::json profile_json(const OpProfile& p) {
  nlohmann::json ops = nlohmann::json::array();
  for (const OpTime& op : p.ops) {
    ops.push_back({{"name", op.name},
                   {"calls", op.calls},
                   {"self_ms", op.self_us / 1e3},
                   {"total_ms", op.total_us / 1e3}});
  }
  return {{"step_ms", p.wall_us / 1e3},
          {"outside_ops_ms", (p.wall_us - p.traced_us) / 1e3},
          {"ops", ops}};
}

std::string profile_table(const OpProfile& p) {
  const auto share = [&](double us) { return format_percent(us / p.wall_us); };
  Table phases({"phase", "ms", "of step"});
  for (const OpTime& op : p.ops) {
    if (!is_phase(op.name)) continue;
    phases.add_row({op.name.substr(kPhase.size()), fmt::format("{:.2f}", op.total_us / 1e3),
                    share(op.total_us)});
  }
  phases.add_row({"(outside every phase)", fmt::format("{:.2f}", (p.wall_us - p.traced_us) / 1e3),
                  share(p.wall_us - p.traced_us)});
  Table ops({"op", "calls", "self ms", "of step", "with callees ms"});
  size_t shown = 0;
  double rest_us = 0;
  for (const OpTime& op : p.ops) {
    if (is_phase(op.name)) continue;
    if (shown++ >= kProfileRows) {
      rest_us += op.self_us;
      continue;
    }
    ops.add_row({op.name, std::to_string(op.calls), fmt::format("{:.2f}", op.self_us / 1e3),
                 share(op.self_us), fmt::format("{:.2f}", op.total_us / 1e3)});
  }
  if (shown > kProfileRows) {
    ops.add_row({fmt::format("({} other ops)", shown - kProfileRows), "",
                 fmt::format("{:.2f}", rest_us / 1e3), share(rest_us), ""});
  }
  return fmt::format(
      "profile of one more step (libtorch's profiler, {:.1f} ms with its overhead; self time = "
      "an op's time less the ops it called):\n\n{}\n{}",
      p.wall_us / 1e3, phases.to_markdown(), ops.to_markdown());
}

}  // namespace

namespace {

// Median training-step time of the bench model (gpt_decoder with o's shape and attention).
struct TrainTiming {
  std::string attn;
  int threads = 0;
  int64_t params = 0;
  double tokens_per_s = 0, median_s = 0, min_s = 0, max_s = 0;
  std::optional<OpProfile> profile;
};

TrainTiming time_kvlab_training(const BenchTrainOptions& o) {
  TrainTiming t;
  t.threads = nn::set_threads(o.threads);
  const ModelShape s = ModelShape::gpt_decoder(o.layers, o.d_model, o.heads,
                                               /*vocab_size=*/256, o.seq_len);
  const ModelConfig config = ModelConfig::make(s, o.attn, DType::kF32);
  require_training_memory(config, o.batch, o.seq_len);
  t.attn = config.attn.to_string();
  torch::manual_seed(0);
  nn::TransformerModel model(config, torch::kFloat32);
  t.params = model->parameter_count();
  for (const auto& layer : *model->model->layers) {
    layer->as<nn::TransformerBlockImpl>()->self_attn->use_fused_attention(!o.composed_attention);
  }
  model->set_matmul_precision(nn::parse_matmul_precision(o.matmul_precision));
  std::vector<std::pair<std::string, torch::Tensor>> params;
  for (const auto& item : model->named_parameters()) params.emplace_back(item.key(), item.value());
  train::AdamW optimizer(params, {});
  const torch::Tensor windows = torch::randint(0, 256, {o.batch, o.seq_len + 1});
  const torch::Tensor inputs = windows.narrow(1, 0, o.seq_len);
  const torch::Tensor targets = windows.narrow(1, 1, o.seq_len);
  // one training step, its phases named for the profile
  const auto step = [&] {
    torch::Tensor loss;
    {
      RECORD_USER_SCOPE("phase: zero_grad");
      optimizer.zero_grad();
    }
    {
      RECORD_USER_SCOPE("phase: forward + loss");
      const torch::Tensor logits = model->forward(inputs);  // [B, T, V]
      loss = torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}),
                                                  targets.reshape({-1}));
    }
    {
      RECORD_USER_SCOPE("phase: backward");
      loss.backward();
    }
    {
      RECORD_USER_SCOPE("phase: optimizer");
      optimizer.step(1e-4);
    }
    (void)loss.item<double>();
  };
  std::vector<double> seconds;
  for (int64_t i = 0; i < o.warmup + o.steps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    step();
    const double s_elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i >= o.warmup) seconds.push_back(s_elapsed);
  }
  if (o.profile) t.profile = profile_ops(step);
  t.median_s = median_of(seconds);
  t.min_s = min_of(seconds);
  t.max_s = max_of(seconds);
  t.tokens_per_s = static_cast<double>(o.batch * o.seq_len) / t.median_s;
  return t;
}

// The same steps in PyTorch eager (bench/pytorch_train.py, run by o.python) on `threads` threads,
// read from the JSON line it prints. Throws SpecError("compare-pytorch") saying what is missing.
TrainTiming time_pytorch_training(const BenchTrainOptions& o, int threads) {
  const std::string script = o.pytorch_script.empty()
                                 ? std::string(KVLAB_SOURCE_DIR) + "/bench/pytorch_train.py"
                                 : o.pytorch_script;
  if (!std::ifstream(script)) {
    throw SpecError("compare-pytorch",
                    "the PyTorch twin '" + script + "' is not there (give --pytorch-script PATH)");
  }
  // malloc set as kvlab sets its own (keep_freed_memory_for_reuse), unless the user chose
  const std::string tunables = std::getenv("GLIBC_TUNABLES") != nullptr
                                   ? ""
                                   : "GLIBC_TUNABLES=" + glibc_tunables_for_reuse() + " ";
  const std::string command = fmt::format(
      "{10}OMP_NUM_THREADS={0} OPENBLAS_NUM_THREADS={0} '{1}' '{2}' --threads {0} --d-model {3} "
      "--layers {4} --heads {5} --seq-len {6} --batch {7} --steps {8} --warmup {9} 2>&1",
      threads, o.python, script, o.d_model, o.layers, o.heads, o.seq_len, o.batch, o.steps,
      o.warmup, tunables);
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(command.c_str(), "r"), ::pclose);
  if (!pipe) throw SpecError("compare-pytorch", "could not start " + o.python);
  std::string output;
  char buffer[4096];
  while (const size_t n = std::fread(buffer, 1, sizeof(buffer), pipe.get()))
    output.append(buffer, n);
  const int status = ::pclose(pipe.release());
  const std::string last = output.substr(output.find_last_of('\n', output.size() - 2) + 1);
  if (status != 0) {
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    throw SpecError("compare-pytorch", o.python + " " + script + " failed (exit " +
                                           std::to_string(code) +
                                           "): " + text_excerpt(output, 400));
  }
  const nlohmann::json j = nlohmann::json::parse(last, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("tokens_per_s")) {
    throw SpecError("compare-pytorch",
                    "no result line from " + script + ": " + text_excerpt(output, 400));
  }
  TrainTiming t;
  t.attn = "mha";
  t.threads = j.at("threads").get<int>();
  t.params = j.at("params").get<int64_t>();
  t.tokens_per_s = j.at("tokens_per_s").get<double>();
  t.median_s = j.at("step_ms_median").get<double>() / 1e3;
  t.min_s = j.at("step_ms_min").get<double>() / 1e3;
  t.max_s = j.at("step_ms_max").get<double>() / 1e3;
  return t;
}

// kvlab and PyTorch eager on the same model, alternating, `rounds` times; medians of the rounds.
int compare_with_pytorch(const BenchTrainOptions& o, std::ostream& out) {
  if (o.attn != "mha") {
    throw SpecError(
        "attn", "--compare-pytorch runs mha (the PyTorch twin's attention), not '" + o.attn + "'");
  }
  if (o.profile) throw SpecError("profile", "is not taken with --compare-pytorch");
  std::vector<double> ours, theirs, ratios;
  int64_t params = 0;
  int threads = 0;
  for (int r = 0; r < o.rounds; ++r) {
    const TrainTiming k = time_kvlab_training(o);
    // the same thread count for libtorch's pool and OpenBLAS's (which torch.set_num_threads
    // leaves alone: "1 thread" in Python ran its matrix products on both cores here)
    const TrainTiming p = time_pytorch_training(o, k.threads);
    if (p.params != k.params) {
      throw SpecError("compare-pytorch", fmt::format("the PyTorch twin has {} parameters, kvlab's "
                                                     "model {}: they are not the same model",
                                                     p.params, k.params));
    }
    ours.push_back(k.tokens_per_s);
    theirs.push_back(p.tokens_per_s);
    ratios.push_back(k.tokens_per_s / p.tokens_per_s);
    params = k.params;
    threads = k.threads;
  }
  const nlohmann::json result = {{"d_model", o.d_model},
                                 {"layers", o.layers},
                                 {"heads", o.heads},
                                 {"seq_len", o.seq_len},
                                 {"batch", o.batch},
                                 {"threads", threads},
                                 {"params", params},
                                 {"attention", o.composed_attention ? "composed" : "fused"},
                                 {"matmuls", gemm_description()},
                                 {"matmul_precision", o.matmul_precision},
                                 {"matmul_precision", o.matmul_precision},
                                 {"rounds", o.rounds},
                                 {"kvlab_tokens_per_s", ours},
                                 {"pytorch_tokens_per_s", theirs},
                                 {"kvlab_over_pytorch", ratios},
                                 {"kvlab_over_pytorch_median", median_of(ratios)}};
  if (o.format == "json") {
    out << result.dump(2) << "\n";
    return 0;
  }
  out << fmt::format(
      "bench train --compare-pytorch: d {} × {} layers × {} heads, seq {} × batch {}, {} "
      "thread(s), {} params, kvlab {} attention and {} matmuls by {} vs PyTorch eager (f32, "
      "composed "
      "attention, foreach AdamW; malloc keeping freed memory, as kvlab's); {} alternating "
      "rounds\n",
      o.d_model, o.layers, o.heads, o.seq_len, o.batch, threads, params,
      o.composed_attention ? "composed" : "fused", o.matmul_precision, gemm_description(),
      o.rounds);
  Table table({"round", "kvlab tokens/s", "PyTorch tokens/s", "kvlab ÷ PyTorch"});
  for (int r = 0; r < o.rounds; ++r) {
    const size_t i = static_cast<size_t>(r);
    table.add_row({std::to_string(r + 1), fmt::format("{:.0f}", ours[i]),
                   fmt::format("{:.0f}", theirs[i]), fmt::format("{:.2f}", ratios[i])});
  }
  table.add_row({"median", fmt::format("{:.0f}", median_of(ours)),
                 fmt::format("{:.0f}", median_of(theirs)),
                 fmt::format("{:.2f}", median_of(ratios))});
  out << table.to_markdown();
  return 0;
}

}  // namespace

int run_bench_train(const BenchTrainOptions& o, std::ostream& out) {
  if (o.steps <= 0) throw SpecError("steps", "must be > 0");
  if (o.warmup < 0) throw SpecError("warmup", "must be >= 0");
  if (o.rounds <= 0) throw SpecError("rounds", "must be > 0");
  if (o.batch <= 0 || o.seq_len <= 0) throw SpecError("batch", "batch and seq-len must be > 0");
  require_output_format(o.format);
  if (o.heads <= 0 || o.d_model % o.heads != 0) {
    throw SpecError("heads", "--d-model must be a multiple of --heads");
  }
  if (o.compare_pytorch) return compare_with_pytorch(o, out);
  const TrainTiming t = time_kvlab_training(o);
  if (o.format == "json") {
    out << nlohmann::json{{"attn", t.attn},
                          {"d_model", o.d_model},
                          {"layers", o.layers},
                          {"heads", o.heads},
                          {"seq_len", o.seq_len},
                          {"batch", o.batch},
                          {"threads", t.threads},
                          {"attention", o.composed_attention ? "composed" : "fused"},
                          {"matmuls", gemm_description()},
                          {"matmul_precision", o.matmul_precision},
                          {"params", t.params},
                          {"tokens_per_s", t.tokens_per_s},
                          {"step_ms_median", 1e3 * t.median_s},
                          {"step_ms_min", 1e3 * t.min_s},
                          {"step_ms_max", 1e3 * t.max_s},
                          {"steps", o.steps},
                          {"profile", t.profile ? profile_json(*t.profile) : nlohmann::json()}}
               .dump(2)
        << "\n";
  } else {
    out << fmt::format(
        "bench train: {} d {} × {} layers × {} heads, seq {} × batch {}, {} "
        "thread(s), {} params, {} attention, {} matmuls by {}\n",
        t.attn, o.d_model, o.layers, o.heads, o.seq_len, o.batch, t.threads, t.params,
        o.composed_attention ? "composed" : "fused", o.matmul_precision, gemm_description());
    out << fmt::format(
        "{:.0f} tokens/s (step median {:.1f} ms, min {:.1f}, max {:.1f}, {} steps "
        "after {} warm-up)\n",
        t.tokens_per_s, 1e3 * t.median_s, 1e3 * t.min_s, 1e3 * t.max_s, o.steps, o.warmup);
    if (t.profile) out << "\n" << profile_table(*t.profile);
  }
  return 0;
}

}  // namespace kvlab
