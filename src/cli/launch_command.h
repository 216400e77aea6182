#pragma once

#include <CLI/CLI.hpp>
#include <atomic>
#include <string>
#include <vector>

namespace kvlab {

struct LaunchOptions {
  int nproc = 2;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::vector<std::string> command;  // after --
};

CLI::App* add_launch_command(CLI::App& app, LaunchOptions& options);
// Starts nproc local processes of `command` with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
// MASTER_PORT set (torchrun's convention); when one fails the others are sent SIGTERM. Returns
// the first non-zero exit status (128 + signal for a killed process), or 0.
int run_launch(const LaunchOptions& options, const std::atomic<bool>* stop);

}  // namespace kvlab
