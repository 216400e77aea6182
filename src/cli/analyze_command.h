#pragma once

#include <CLI/CLI.hpp>

#include "experiments/analyze.h"

namespace kvlab {

CLI::App* add_analyze_command(CLI::App& app, AnalyzeOptions& options);

}  // namespace kvlab
