#pragma once

#include <CLI/CLI.hpp>
#include <ostream>
#include <string>

#include "serve/load_generator.h"

namespace kvlab {

struct BenchServeOptions {
  serve::LoadOptions load;
  std::string format = "text";
  std::string request_rate = "inf";
};

// `kvlab bench serve`, under the bench command.
CLI::App* add_bench_serve_command(CLI::App& bench, BenchServeOptions& options);
int run_bench_serve(BenchServeOptions options, std::ostream& out, std::ostream& err);

}  // namespace kvlab
