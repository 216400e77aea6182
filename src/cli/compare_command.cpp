#include "cli/compare_command.h"

#include <nlohmann/json.hpp>

#include "io/json_document.h"
#include "io/results_json.h"

namespace kvlab {

CLI::App* add_compare_command(CLI::App& app, CompareOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "compare",
      "Train every attention variant on every task for every seed and compare their quality "
      "side by side (mean ± std over seeds), next to the seeds' reported numbers.");
  cmd->add_option(
         "--suite", o.suite,
         "synthetic (seed 003 §4.1: reverse, sort, sub, swap, copy) | lm (a byte-level "
         "GPT on the King James Bible, 16 variants incl. gqa, mla, five gva rows, gta and gla) | "
         "vision (ViT on Fashion-MNIST and set anomaly, seed 003's six variants) | convert "
         "(the lm model trained with gqa:2 and mha, converted by kvlab convert to K=V, GVA, GTA, "
         "MLA and fewer groups, uptrained by distillation with 5% and 20% of the teachers' tokens, "
         "against each target trained from scratch; --attn replaces the targets) | serve (the "
         "serving engine at one KV memory budget: sequences each variant's cache holds and "
         "runs, throughput at saturation and at offered loads, TTFT/TPOT, preemptions, against "
         "a roofline; random weights)")
      ->capture_default_str();
  cmd->add_option("--attn", o.attn,
                  "Attention spec, repeatable (default: mha, q-kv, qk-v, qkv1, qk-v+, qkv1+)");
  cmd->add_option("--tasks", o.tasks, "Comma list of tasks (default: all five)")
      ->check(CLI::Validator(
          [](const std::string& text) {
            return text.find_first_not_of(", ") == std::string::npos ? "names no task" : "";
          },
          "", "tasks"));
  cmd->add_option("--seeds", o.seeds,
                  "Seeds per variant and task, 1 to 1000 (default: synthetic 3, lm 2, vision 2)")
      ->check(CLI::Range(int64_t{1}, int64_t{1000}));
  cmd->add_option("--preset", o.preset,
                  "quick (synthetic ~7, lm ~25, vision ~10 minutes on 2 cores) | paper "
                  "(synthetic, vision: the seed's settings) | base (lm: 6 layers of 256, ~70 "
                  "hours on 2 cores)")
      ->capture_default_str();
  cmd->add_option("--steps", o.steps, "Optimizer steps per run, overriding the preset");
  cmd->add_option("--eval-windows", o.eval_windows,
                  "lm, convert: held-out windows of the context length each run is scored on "
                  "(and, with --cache-dtype, decoded through each cache), overriding the preset "
                  "(quick: 256); fewer is faster and noisier")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--out", o.out, "Folder for results.json, results.md and runs/")->required();
  cmd->add_option("--jobs", o.jobs, "Runs trained at once (0: one per core)")
      ->capture_default_str();
  cmd->add_option("--matmul-precision", o.matmul_precision,
                  "lm: the linears' products in every run, f32 | bf16 (train --matmul-precision)")
      ->capture_default_str();
  cmd->add_option("--cache-dtype", o.cache_dtypes,
                  "lm: also decode every checkpoint's held-out text through caches of these "
                  "dtypes (comma list of q8_0, q4_0, fp8, f16, f32) beside bf16: perplexity "
                  "change, KL divergence and greedy agreement against the bf16 cache, cache "
                  "bytes per token, and cache_pareto.svg; serve: every --attn again with each "
                  "of these caches")
      ->delimiter(',');
  cmd->add_option("--checkpoint", o.checkpoints,
                  "serve: serve these trained or converted models (run folders, checkpoints or "
                  "Hugging Face folders of one shape; repeatable) instead of random weights");
  cmd->add_option("--url", o.url,
                  "serve: load a running `kvlab serve` at this address (its /info gives the "
                  "cache arithmetic) instead of models in this process");
  cmd->add_option("--requests", o.requests,
                  "serve: requests at each load level, 1 to 100000, overriding the preset "
                  "(quick: 48)")
      ->check(CLI::Range(int64_t{1}, int64_t{100000}));
  cmd->add_option("--data", o.data,
                  "lm: a file holding `bible \"gen1:1-re22:21\"`'s output (default: run bible); "
                  "vision: the Fashion-MNIST folder (default /usr/share/datasets/fashion-mnist)");
  return cmd;
}

CLI::App* add_report_command(CLI::App& app, ReportOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "report", "Rebuild a compare folder's results.md and plots from its results.json alone");
  cmd->add_option("dir", o.dir, "The folder kvlab compare --out wrote")->required();
  return cmd;
}

int run_report(const ReportOptions& o, std::ostream& out) {
  const nlohmann::json results =
      read_json_document(o.dir + "/results.json", "results", kMaxResultsBytes);
  out << render_report(results, o.dir);
  return 0;
}

}  // namespace kvlab
