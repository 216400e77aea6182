// The kvlab program as a function: the subcommands, their flags, and what a user sees of an
// error (a message on stderr and exit code 2).
#include "cli/run_kvlab.h"

#include <CLI/CLI.hpp>
#include <exception>
#include <new>

#include "cli/analyze_command.h"
#include "cli/bench_command.h"
#include "cli/bench_serve_command.h"
#include "cli/cache_command.h"
#include "cli/compare_command.h"
#include "cli/convert_command.h"
#include "cli/export_command.h"
#include "cli/flag_checks.h"
#include "cli/generate_command.h"
#include "cli/interrupt.h"
#include "cli/launch_command.h"
#include "cli/serve_command.h"
#include "cli/summary_command.h"
#include "cli/tokenize_command.h"
#include "cli/train_command.h"
#include "io/json_document.h"
#include "kernels/process_memory.h"
#include "spec/version.h"

namespace kvlab {
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

}  // namespace

int run_kvlab(int argc, char** argv, std::istream& in, std::ostream& out, std::ostream& err) {
  keep_freed_memory_for_reuse();
  CLI::App app(
      "kvlab — attention variants that keep less in the KV cache (MHA, GQA, MQA, MLA, GVA and "
      "the projection-sharing family): count what each costs, train, decode, report.",
      "kvlab");
  app.set_version_flag("--version", kVersion);
  app.require_subcommand(1);
  app.footer("Run 'kvlab SUBCOMMAND --help' for a subcommand's flags.");

  CacheOptions cache_options;
  CLI::App* cache = add_cache_command(app, cache_options);
  SummaryOptions summary_options;
  CLI::App* summary = add_summary_command(app, summary_options);
  TrainCommandOptions train_options;
  CLI::App* train = add_train_command(app, train_options);
  EvalCommandOptions eval_options;
  CLI::App* eval = add_eval_command(app, eval_options);
  CompareOptions compare_options;
  CLI::App* compare = add_compare_command(app, compare_options);
  LaunchOptions launch_options;
  CLI::App* launch = add_launch_command(app, launch_options);
  AnalyzeOptions analyze_options;
  CLI::App* analyze = add_analyze_command(app, analyze_options);
  ReportOptions report_options;
  CLI::App* report = add_report_command(app, report_options);
  ExportOptions export_options;
  CLI::App* export_cmd = add_export_command(app, export_options);
  ConvertOptions convert_options;
  CLI::App* convert = add_convert_command(app, convert_options);
  TokenizeOptions tokenize_options;
  CLI::App* tokenize = add_tokenize_command(app, tokenize_options);
  GenerateOptions generate_options;
  CLI::App* generate = add_generate_command(app, generate_options);
  BenchTrainOptions bench_train_options;
  BenchMemoryOptions bench_memory_options;
  BenchDecodeOptions bench_decode_options;
  BenchComputeOptions bench_compute_options;
  BenchModelOptions bench_model_options;
  const BenchCommands bench =
      add_bench_commands(app, bench_train_options, bench_memory_options, bench_compute_options,
                         bench_decode_options, bench_model_options);

  ServeOptions serve_options;
  CLI::App* serve = add_serve_command(app, serve_options);
  BenchServeOptions bench_serve_options;
  CLI::App* bench_serve =
      add_bench_serve_command(*app.get_subcommand("bench"), bench_serve_options);

  check_numeric_flags(app);

  install_interrupt_handlers();
  const std::atomic<bool>* stop = interrupt_flag();
  if (const std::string unknown = unknown_subcommand(app, argc, argv); !unknown.empty()) {
    err << "kvlab: " << unknown << "\nRun 'kvlab --help' for usage.\n";
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e, out, err);  // --help, --version
    err << "kvlab: " << error_summary(e.what()) << "\nRun 'kvlab --help' for usage.\n";
    return 2;
  }

  std::string command = "kvlab";
  try {
    if (cache->parsed()) {
      command = "kvlab cache";
      run_cache(cache_options, out);
    } else if (summary->parsed()) {
      command = "kvlab summary";
      return run_summary(summary_options, out, err);
    } else if (train->parsed()) {
      command = "kvlab train";
      return run_train(train_options, *train, stop, out);
    } else if (eval->parsed()) {
      command = "kvlab eval";
      return run_eval(eval_options, out);
    } else if (compare->parsed()) {
      command = "kvlab compare";
      const DeferredInterrupt saving_on_stop;  // every run saves its checkpoint
      return run_compare(compare_options, stop, out);
    } else if (launch->parsed()) {
      command = "kvlab launch";
      const DeferredInterrupt saving_on_stop;  // the ranks save, then exit
      return run_launch(launch_options, stop);
    } else if (analyze->parsed()) {
      command = "kvlab analyze";
      return run_analyze(analyze_options, out);
    } else if (report->parsed()) {
      command = "kvlab report";
      return run_report(report_options, out);
    } else if (export_cmd->parsed()) {
      command = "kvlab export";
      return run_export(export_options, out);
    } else if (convert->parsed()) {
      command = "kvlab convert";
      return run_convert(convert_options, out, err);
    } else if (tokenize->parsed()) {
      command = "kvlab tokenize";
      return run_tokenize(tokenize_options, in, out);
    } else if (bench.train->parsed()) {
      command = "kvlab bench train";
      return run_bench_train(bench_train_options, out);
    } else if (generate->parsed()) {
      command = "kvlab generate";
      return run_generate(generate_options, stop, out);
    } else if (bench.decode->parsed()) {
      command = "kvlab bench decode";
      return run_bench_decode(bench_decode_options, out);
    } else if (bench.prefill->parsed()) {
      command = "kvlab bench prefill";
      return run_bench_prefill(bench_model_options, out);
    } else if (bench.generate->parsed()) {
      command = "kvlab bench generate";
      return run_bench_generate(bench_model_options, out);
    } else if (bench.compute->parsed()) {
      command = "kvlab bench compute";
      return run_bench_compute(bench_compute_options, out);
    } else if (serve->parsed()) {
      command = "kvlab serve";
      const DeferredInterrupt draining_on_stop;  // the server ends its requests, then exits 0
      return run_serve(serve_options, *stop, err);
    } else if (bench_serve->parsed()) {
      command = "kvlab bench serve";
      return run_bench_serve(bench_serve_options, out, err);
    } else if (bench.memory->parsed()) {
      command = "kvlab bench memory";
      return run_bench_memory(bench_memory_options, out);
    }
  } catch (const std::bad_alloc&) {
    err << command << ": out of memory (the inputs ask for more than this machine has)\n";
    return 2;
  } catch (const std::exception& e) {
    err << command << ": " << error_summary(e.what()) << "\n";
    return 2;
  }
  return 0;
}

}  // namespace kvlab
