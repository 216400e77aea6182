#pragma once

#include <CLI/CLI.hpp>
#include <ostream>
#include <string>

#include "experiments/compare.h"

namespace kvlab {

CLI::App* add_compare_command(CLI::App& app, CompareOptions& options);

// kvlab report DIR
struct ReportOptions {
  std::string dir;
};
CLI::App* add_report_command(CLI::App& app, ReportOptions& options);
int run_report(const ReportOptions& options, std::ostream& out);

}  // namespace kvlab
