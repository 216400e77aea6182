#pragma once

#include <CLI/CLI.hpp>
#include <ostream>
#include <string>

namespace kvlab {

struct ExportOptions {
  std::string checkpoint;
  std::string format = "hf";
  std::string out;
  std::string dtype = "f16";  // gguf: the matrices' type
};

CLI::App* add_export_command(CLI::App& app, ExportOptions& options);
int run_export(const ExportOptions& options, std::ostream& out);

}  // namespace kvlab
