// kvlab: attention variants that keep less in the KV cache. Each subcommand is a thin
// layer over the libraries; bad input becomes a message on stderr and exit code 2.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <new>

#include "cli/analyze_command.h"
#include "cli/bench_command.h"
#include "cli/cache_command.h"
#include "cli/compare_command.h"
#include "cli/convert_command.h"
#include "cli/export_command.h"
#include "cli/flag_checks.h"
#include "cli/generate_command.h"
#include "cli/interrupt.h"
#include "cli/launch_command.h"
#include "cli/summary_command.h"
#include "cli/tokenize_command.h"
#include "cli/train_command.h"
#include "io/json_document.h"
#include "kernels/process_memory.h"
#include "spec/version.h"

namespace {

// An error for the terminal: its first line (a libtorch error carries a stack trace after
// it), cut to a length a person reads.
std::string error_summary(const char* what) {
  std::string_view text = what;
  const size_t newline = text.find('\n');
  if (newline != std::string_view::npos) text = text.substr(0, newline);
  return kvlab::text_excerpt(text, 600);
}

// The first word that is not a flag, when it names no subcommand: CLI11 would say only that
// a subcommand is required.
std::string unknown_subcommand(const CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return "";
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (sub->check_name(argv[1])) return "";
  }
  std::string known;
  for (const CLI::App* sub : app.get_subcommands({})) {
    known += (known.empty() ? "" : ", ") + sub->get_name();
  }
  return "unknown subcommand '" + kvlab::text_excerpt(argv[1], 40) + "' (known: " + known + ")";
}

// Idle OpenMP workers must sleep, not spin: on 2 cores a spinning pool makes 2 threads slower
// than 1. libgomp reads OMP_WAIT_POLICY once, in its load-time constructor, so setting it in
// main() is too late, and so is setenv() from the executable's .preinit_array (which runs before
// the libraries' constructors): libc's own initialisation then resets the environment to the
// one the process started with. So when the variable is unset, the preinit function executes
// the program again with OMP_WAIT_POLICY=passive added, before any library constructor has run
// (about 40 ms of dynamic loading). A user's own setting is kept; if the exec fails, the
// program goes on with libgomp's default.
void exec_again_with_passive_omp_workers(int, char** argv, char** envp) {
  constexpr char kName[] = "OMP_WAIT_POLICY=";
  size_t n = 0;
  for (; envp != nullptr && envp[n] != nullptr; ++n) {
    if (std::strncmp(envp[n], kName, sizeof(kName) - 1) == 0) return;
  }
  auto** env = static_cast<char**>(std::malloc((n + 2) * sizeof(char*)));
  if (env == nullptr) return;
  for (size_t i = 0; i < n; ++i) env[i] = envp[i];
  env[n] = const_cast<char*>("OMP_WAIT_POLICY=passive");
  env[n + 1] = nullptr;
  ::execve("/proc/self/exe", argv, env);
  std::free(env);  // the exec failed: run on with the default policy
}

}  // namespace

__attribute__((section(".preinit_array"), used)) static void (*const kPreinitOmpWaitPolicy)(
    int, char**, char**) = &exec_again_with_passive_omp_workers;

int main(int argc, char** argv) {
  kvlab::keep_freed_memory_for_reuse();
  CLI::App app(
      "kvlab — attention variants that keep less in the KV cache (MHA, GQA, MQA, MLA, GVA and "
      "the projection-sharing family): count what each costs, train, decode, report.",
      "kvlab");
  app.set_version_flag("--version", kvlab::kVersion);
  app.require_subcommand(1);
  app.footer("Run 'kvlab SUBCOMMAND --help' for a subcommand's flags.");

  kvlab::CacheOptions cache_options;
  CLI::App* cache = kvlab::add_cache_command(app, cache_options);
  kvlab::SummaryOptions summary_options;
  CLI::App* summary = kvlab::add_summary_command(app, summary_options);
  kvlab::TrainCommandOptions train_options;
  CLI::App* train = kvlab::add_train_command(app, train_options);
  kvlab::EvalCommandOptions eval_options;
  CLI::App* eval = kvlab::add_eval_command(app, eval_options);
  kvlab::CompareOptions compare_options;
  CLI::App* compare = kvlab::add_compare_command(app, compare_options);
  kvlab::LaunchOptions launch_options;
  CLI::App* launch = kvlab::add_launch_command(app, launch_options);
  kvlab::AnalyzeOptions analyze_options;
  CLI::App* analyze = kvlab::add_analyze_command(app, analyze_options);
  kvlab::ReportOptions report_options;
  CLI::App* report = kvlab::add_report_command(app, report_options);
  kvlab::ExportOptions export_options;
  CLI::App* export_cmd = kvlab::add_export_command(app, export_options);
  kvlab::ConvertOptions convert_options;
  CLI::App* convert = kvlab::add_convert_command(app, convert_options);
  kvlab::TokenizeOptions tokenize_options;
  CLI::App* tokenize = kvlab::add_tokenize_command(app, tokenize_options);
  kvlab::GenerateOptions generate_options;
  CLI::App* generate = kvlab::add_generate_command(app, generate_options);
  kvlab::BenchTrainOptions bench_train_options;
  kvlab::BenchMemoryOptions bench_memory_options;
  kvlab::BenchDecodeOptions bench_decode_options;
  kvlab::BenchComputeOptions bench_compute_options;
  kvlab::BenchModelOptions bench_model_options;
  const kvlab::BenchCommands bench =
      kvlab::add_bench_commands(app, bench_train_options, bench_memory_options,
                                bench_compute_options, bench_decode_options, bench_model_options);

  kvlab::check_numeric_flags(app);

  kvlab::install_interrupt_handlers();
  const std::atomic<bool>* stop = kvlab::interrupt_flag();
  if (const std::string unknown = unknown_subcommand(app, argc, argv); !unknown.empty()) {
    std::cerr << "kvlab: " << unknown << "\nRun 'kvlab --help' for usage.\n";
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::cerr << "kvlab: " << error_summary(e.what()) << "\nRun 'kvlab --help' for usage.\n";
    return 2;
  }

  std::string command = "kvlab";
  try {
    if (cache->parsed()) {
      command = "kvlab cache";
      kvlab::run_cache(cache_options, std::cout);
    } else if (summary->parsed()) {
      command = "kvlab summary";
      return kvlab::run_summary(summary_options, std::cout, std::cerr);
    } else if (train->parsed()) {
      command = "kvlab train";
      return kvlab::run_train(train_options, *train, stop, std::cout);
    } else if (eval->parsed()) {
      command = "kvlab eval";
      return kvlab::run_eval(eval_options, std::cout);
    } else if (compare->parsed()) {
      command = "kvlab compare";
      const kvlab::DeferredInterrupt saving_on_stop;  // every run saves its checkpoint
      return kvlab::run_compare(compare_options, stop, std::cout);
    } else if (launch->parsed()) {
      command = "kvlab launch";
      const kvlab::DeferredInterrupt saving_on_stop;  // the ranks save, then exit
      return kvlab::run_launch(launch_options, stop);
    } else if (analyze->parsed()) {
      command = "kvlab analyze";
      return kvlab::run_analyze(analyze_options, std::cout);
    } else if (report->parsed()) {
      command = "kvlab report";
      return kvlab::run_report(report_options, std::cout);
    } else if (export_cmd->parsed()) {
      command = "kvlab export";
      return kvlab::run_export(export_options, std::cout);
    } else if (convert->parsed()) {
      command = "kvlab convert";
      return kvlab::run_convert(convert_options, std::cout, std::cerr);
    } else if (tokenize->parsed()) {
      command = "kvlab tokenize";
      return kvlab::run_tokenize(tokenize_options, std::cin, std::cout);
    } else if (bench.train->parsed()) {
      command = "kvlab bench train";
      return kvlab::run_bench_train(bench_train_options, std::cout);
    } else if (generate->parsed()) {
      command = "kvlab generate";
      return kvlab::run_generate(generate_options, stop, std::cout);
    } else if (bench.decode->parsed()) {
      command = "kvlab bench decode";
      return kvlab::run_bench_decode(bench_decode_options, std::cout);
    } else if (bench.prefill->parsed()) {
      command = "kvlab bench prefill";
      return kvlab::run_bench_prefill(bench_model_options, std::cout);
    } else if (bench.generate->parsed()) {
      command = "kvlab bench generate";
      return kvlab::run_bench_generate(bench_model_options, std::cout);
    } else if (bench.compute->parsed()) {
      command = "kvlab bench compute";
      return kvlab::run_bench_compute(bench_compute_options, std::cout);
    } else if (bench.memory->parsed()) {
      command = "kvlab bench memory";
      return kvlab::run_bench_memory(bench_memory_options, std::cout);
    }
  } catch (const std::bad_alloc&) {
    std::cerr << command << ": out of memory (the inputs ask for more than this machine has)\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << command << ": " << error_summary(e.what()) << "\n";
    return 2;
  }
  return 0;
}
