#include "harness/background.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "harness/process.h"

namespace kvlab::test {

BackgroundProcess::BackgroundProcess(const std::string& binary,
                                     const std::vector<std::string>& args,
                                     const std::string& out_path, const std::string& err_path)
    : err_path_(err_path) {
  std::vector<std::string> words = args;
  std::vector<char*> argv;
  std::string name = binary;
  argv.push_back(name.data());
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (out < 0 || err < 0 || in < 0) throw std::runtime_error("harness: cannot open " + out_path);
  pid_ = ::fork();
  if (pid_ == 0) {
    ::dup2(in, STDIN_FILENO);
    ::dup2(out, STDOUT_FILENO);
    ::dup2(err, STDERR_FILENO);
    ::execv(binary.c_str(), argv.data());
    const std::string why = "harness: cannot run " + binary + ": " + std::strerror(errno) + "\n";
    (void)!::write(STDERR_FILENO, why.data(), why.size());
    ::_exit(127);
  }
  ::close(out);
  ::close(err);
  ::close(in);
  if (pid_ < 0) throw std::runtime_error("harness: fork failed");
}

BackgroundProcess::~BackgroundProcess() {
  if (!status_) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
}

std::string BackgroundProcess::err() const { return slurp(err_path_); }

bool BackgroundProcess::ended() {
  if (status_) return true;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) != pid_) return false;
  status_ = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  return true;
}

std::optional<std::string> BackgroundProcess::wait_for_stderr(const std::string& needle,
                                                              double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    const std::string text = err();
    const size_t at = text.find(needle);
    if (at != std::string::npos) {
      const size_t begin = text.rfind('\n', at);
      const size_t end = text.find('\n', at);
      if (end != std::string::npos) {
        return text.substr(begin == std::string::npos ? 0 : begin + 1,
                           end - (begin == std::string::npos ? 0 : begin + 1));
      }
    }
    if (ended() || std::chrono::steady_clock::now() > deadline) {
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void BackgroundProcess::signal(int sig) const {
  if (!status_) ::kill(pid_, sig);
}

std::optional<int> BackgroundProcess::wait(double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!ended()) {
    if (std::chrono::steady_clock::now() > deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return status_;
}

}  // namespace kvlab::test
