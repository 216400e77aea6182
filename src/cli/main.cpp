// kvlab: attention variants that keep less in the KV cache. Each subcommand is a thin
// layer over the libraries; errors become a message on stderr and exit code 2.
#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>

#include "cli/cache_command.h"
#include "cli/summary_command.h"

int main(int argc, char** argv) {
  CLI::App app(
      "kvlab — attention variants that keep less in the KV cache (MHA, GQA, MQA, MLA, GVA and "
      "the projection-sharing family): count what each costs, train, decode, report.",
      "kvlab");
  app.set_version_flag("--version", KVLAB_VERSION);
  app.require_subcommand(1);
  app.footer("Run 'kvlab SUBCOMMAND --help' for a subcommand's flags.");

  kvlab::CacheOptions cache_options;
  CLI::App* cache = kvlab::add_cache_command(app, cache_options);
  kvlab::SummaryOptions summary_options;
  CLI::App* summary = kvlab::add_summary_command(app, summary_options);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::cerr << "kvlab: " << e.what() << "\nRun 'kvlab --help' for usage.\n";
    return 2;
  }

  const char* command = cache->parsed() ? "cache" : "summary";
  try {
    if (cache->parsed()) kvlab::run_cache(cache_options, std::cout);
    if (summary->parsed()) return kvlab::run_summary(summary_options, std::cout, std::cerr);
  } catch (const std::exception& e) {
    std::cerr << "kvlab " << command << ": " << e.what() << "\n";
    return 2;
  }
  return 0;
}
