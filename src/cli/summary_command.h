#pragma once

#include <CLI/CLI.hpp>
#include <ostream>
#include <string>

#include "cli/model_flags.h"

namespace kvlab {

struct SummaryOptions {
  ModelFlags model;
  std::string attn;  // empty: the model's own
  std::string format = "table";
};

CLI::App* add_summary_command(CLI::App& app, SummaryOptions& options);
// Builds the model on the meta device (no memory) and prints its module tree with
// parameter counts next to the spec's. Returns 0, or 1 if the two counts differ.
// Throws SpecError for bad input, before writing anything.
int run_summary(const SummaryOptions& options, std::ostream& out, std::ostream& err);

}  // namespace kvlab
