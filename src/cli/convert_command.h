#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <ostream>
#include <string>

namespace kvlab {

struct ConvertOptions {
  std::string checkpoint;
  std::string attn;
  std::string out;
  std::string calibration;             // a text file; empty: the run's task training data
  int64_t calibration_tokens = 65536;  // tokens to fit on
  int64_t held_out_windows = 8;        // windows the errors are measured on
  int64_t context = 0;                 // tokens per window; 0: the task's, or up to 512
  std::string format = "text";
};

CLI::App* add_convert_command(CLI::App& app, ConvertOptions& options);
int run_convert(const ConvertOptions& options, std::ostream& out, std::ostream& progress);

}  // namespace kvlab
