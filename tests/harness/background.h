#pragma once
// A program left running while a test talks to it (a server): started by fork + exec with its
// stdout and stderr in files, stopped by a signal, always reaped. Its destructor kills what still
// runs, so a failing test leaves no process behind.
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace kvlab::test {

class BackgroundProcess {
 public:
  // Runs binary with args; out_path, err_path: where its stdout and stderr go.
  BackgroundProcess(const std::string& binary, const std::vector<std::string>& args,
                    const std::string& out_path, const std::string& err_path);
  ~BackgroundProcess();
  BackgroundProcess(const BackgroundProcess&) = delete;
  BackgroundProcess& operator=(const BackgroundProcess&) = delete;

  pid_t pid() const { return pid_; }
  // The first line of stderr that contains `needle`, once written; nullopt when the process
  // ended or timeout_s passed first.
  std::optional<std::string> wait_for_stderr(const std::string& needle, double timeout_s);
  std::string err() const;
  void signal(int sig) const;
  // The exit status (or -N for signal N) once the process ended; nullopt after timeout_s (it still
  // runs).
  std::optional<int> wait(double timeout_s);

 private:
  bool ended();  // reaps it once it has ended
  pid_t pid_ = -1;
  std::string err_path_;
  std::optional<int> status_;
};

}  // namespace kvlab::test
