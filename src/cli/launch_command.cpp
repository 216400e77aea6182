#include "cli/launch_command.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <iostream>
#include <thread>

#include "spec/spec_error.h"

namespace kvlab {

CLI::App* add_launch_command(CLI::App& app, LaunchOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "launch",
      "Run a command as N local ranks of a data-parallel job (torchrun's variables: RANK, "
      "WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), e.g. kvlab launch --nproc 2 -- "
      "kvlab train --task kjv --out runs/ddp");
  cmd->add_option("--nproc", o.nproc, "Processes (ranks) to start")->capture_default_str();
  cmd->add_option("--master-addr", o.master_addr, "Address of rank 0 (its TCPStore)")
      ->capture_default_str();
  cmd->add_option("--master-port", o.master_port, "Port of rank 0's TCPStore")
      ->capture_default_str();
  cmd->add_option("command", o.command, "The command each rank runs (after --)")->required();
  return cmd;
}

int run_launch(const LaunchOptions& o, const std::atomic<bool>* stop) {
  if (o.nproc < 1 || o.nproc > 1024) throw SpecError("nproc", "must be in [1, 1024]");
  if (o.master_port < 1 || o.master_port > 65535) {
    throw SpecError("master_port", "must be in [1, 65535]");
  }
  std::vector<std::string> args = o.command;
  if (args.front() == "kvlab") {
    // this very program, even when it is not on PATH
    char self[4096];
    const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) args.front().assign(self, static_cast<size_t>(n));
  }
  std::vector<pid_t> children;
  for (int rank = 0; rank < o.nproc; ++rank) {
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
    if (pid == 0) {
      ::setenv("RANK", std::to_string(rank).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(o.nproc).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(o.nproc).c_str(), 1);
      ::setenv("MASTER_ADDR", o.master_addr.c_str(), 1);
      ::setenv("MASTER_PORT", std::to_string(o.master_port).c_str(), 1);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      std::cerr << "kvlab launch: cannot run " << args.front() << ": " << std::strerror(errno)
                << "\n";
      ::_exit(127);
    }
    children.push_back(pid);
  }
  int status_out = 0;
  size_t running = children.size();
  bool forwarded_stop = false;
  while (running > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid < 0 && errno != EINTR) break;
    if (pid <= 0) {
      // Ctrl-C reaches the ranks through the terminal's process group; a SIGTERM sent to
      // launch alone is passed on once
      if (stop != nullptr && stop->load() && !forwarded_stop) {
        for (pid_t c : children) ::kill(c, SIGINT);
        forwarded_stop = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    --running;
    int code = 0;
    if (WIFEXITED(status)) code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) code = 128 + WTERMSIG(status);
    for (size_t r = 0; r < children.size(); ++r) {
      if (children[r] != pid) continue;
      children[r] = -1;
      if (code != 0 && status_out == 0) {
        status_out = code;
        std::cerr << fmt::format(
            "kvlab launch: rank {} exited with status {}; stopping the others\n", r, code);
        for (pid_t c : children) {
          if (c > 0) ::kill(c, SIGTERM);
        }
      }
    }
  }
  return status_out;
}

}  // namespace kvlab
