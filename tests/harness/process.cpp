#include "harness/process.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <utility>

namespace kvlab::test {
namespace {

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error(what + ": " + std::strerror(errno));
}

// An anonymous file the child writes one stream into; the parent reads it after the exit
// (no pipe to drain while the child runs).
class CapturedStream {
 public:
  explicit CapturedStream(const char* name) : fd_(::memfd_create(name, MFD_CLOEXEC)) {
    if (fd_ < 0) fail("memfd_create");
  }
  ~CapturedStream() { ::close(fd_); }
  CapturedStream(const CapturedStream&) = delete;
  CapturedStream& operator=(const CapturedStream&) = delete;
  int fd() const { return fd_; }
  std::string text() const {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) fail("fstat");
    std::string text(static_cast<size_t>(st.st_size), '\0');
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t n =
          ::pread(fd_, text.data() + done, text.size() - done, static_cast<off_t>(done));
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    text.resize(done);
    return text;
  }

 private:
  int fd_;
};

// In the child: stdin, stdout, stderr and the folder as the invocation says. Returns false
// (errno set) when one cannot be had; the child then reports it and exits 127.
bool set_up_child(const Invocation& invocation, const CapturedStream& out,
                  const CapturedStream& err) {
  if (::dup2(out.fd(), STDOUT_FILENO) < 0 || ::dup2(err.fd(), STDERR_FILENO) < 0) return false;
  const int in = ::open(invocation.stdin_path.c_str(), O_RDONLY);
  if (in < 0 || ::dup2(in, STDIN_FILENO) < 0) return false;
  ::close(in);
  return invocation.cwd.empty() || ::chdir(invocation.cwd.c_str()) == 0;
}

std::vector<char*> argv_of(const std::string& name, std::vector<std::string>& words) {
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(name.c_str()));
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  return argv;
}

// Waits for `pid` at most the invocation's timeout (polling, so that a child stuck in a
// blocking call is still killed), then fills the result's exit code.
void wait_for(pid_t pid, double timeout_s, ProcessResult& result) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  auto pause = std::chrono::microseconds(100);
  int status = 0;
  for (;;) {
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) fail("waitpid");
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      result.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(10000));
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

// started(pid): in the parent, once the child is forked, before it is waited for.
template <typename RunInChild, typename Started = void (*)(pid_t)>
ProcessResult run_in_child(
    const Invocation& invocation, RunInChild&& run_in_child, Started&& started = [](pid_t) {}) {
  CapturedStream out("stdout"), err("stderr");
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);  // or the child would write the parent's buffered output again
  const pid_t pid = ::fork();
  if (pid < 0) fail("fork");
  if (pid == 0) {
    if (!set_up_child(invocation, out, err)) {
      const std::string why = std::string("harness: ") + std::strerror(errno) + "\n";
      (void)!::write(err.fd(), why.data(), why.size());
      ::_exit(127);
    }
    run_in_child();  // does not return
  }
  started(pid);
  ProcessResult result;
  wait_for(pid, invocation.timeout_s, result);
  result.out = out.text();
  result.err = err.text();
  return result;
}

// In the child: the program with the invocation's words; exits with what it returned.
[[noreturn]] void run_program(const ProgramMain& program, const std::string& name,
                              const Invocation& invocation) {
  std::vector<std::string> words = invocation.args;
  std::vector<char*> argv = argv_of(name, words);
  const int code = program(static_cast<int>(words.size() + 1), argv.data());
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  ::_exit(code);
}

}  // namespace

ProcessResult run_forked(const ProgramMain& program, const std::string& name,
                         const Invocation& invocation) {
  return run_in_child(invocation, [&] { run_program(program, name, invocation); });
}

// The "State:" letter and the TracerPid of /proc/PID/status.
static std::pair<char, long> trace_state(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  char state = '?';
  long tracer = 0;
  while (std::getline(status, line)) {
    if (line.rfind("State:", 0) == 0 && line.size() > 7) state = line[7];
    if (line.rfind("TracerPid:", 0) == 0) tracer = std::strtol(line.c_str() + 10, nullptr, 10);
  }
  return {state, tracer};
}

ProcessResult run_forked_traced(const ProgramMain& program, const std::string& name,
                                const Invocation& invocation,
                                const std::vector<std::string>& tracer) {
  if (tracer.empty()) throw std::invalid_argument("run_forked_traced: no tracer command");
  pid_t tracer_pid = -1;
  ProcessResult result = run_in_child(
      invocation,
      [&] {
        // stopped until the tracer holds it; any process may trace it (Yama's ptrace_scope 1
        // otherwise allows only ancestors)
        ::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
        ::raise(SIGSTOP);
        run_program(program, name, invocation);
      },
      [&](pid_t pid) {
        int status = 0;
        if (::waitpid(pid, &status, WUNTRACED) != pid || !WIFSTOPPED(status)) {
          throw std::runtime_error("run_forked_traced: the child did not stop before its run");
        }
        std::vector<std::string> words(tracer.begin() + 1, tracer.end());
        words.push_back("-p");
        words.push_back(std::to_string(pid));
        std::vector<char*> argv = argv_of(tracer.front(), words);
        tracer_pid = ::fork();
        if (tracer_pid < 0) fail("fork");
        if (tracer_pid == 0) {
          const int null = ::open("/dev/null", O_RDWR);
          ::dup2(null, STDIN_FILENO);
          ::dup2(null, STDOUT_FILENO);
          ::dup2(null, STDERR_FILENO);  // its trace, unless its arguments say -o
          ::execv(tracer.front().c_str(), argv.data());
          ::_exit(127);
        }
        // Resumed only once the tracer has it in a tracing stop ('t'): from then on every system
        // call it makes is the tracer's to see.
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        for (;;) {
          const auto [state, traced_by] = trace_state(pid);
          if (traced_by == tracer_pid && state == 't') break;
          int tracer_status = 0;
          if (::waitpid(tracer_pid, &tracer_status, WNOHANG) == tracer_pid ||
              std::chrono::steady_clock::now() > deadline) {
            ::kill(pid, SIGKILL);
            ::kill(tracer_pid, SIGKILL);
            ::waitpid(tracer_pid, &tracer_status, 0);
            throw std::runtime_error("run_forked_traced: " + tracer.front() +
                                     " did not attach to the child (ptrace not permitted here?)");
          }
          std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
        ::kill(pid, SIGCONT);
      });
  int tracer_status = 0;
  ::waitpid(tracer_pid, &tracer_status, 0);
  return result;
}

ProcessResult run_exec(const std::string& binary, const Invocation& invocation) {
  return run_in_child(invocation, [&] {
    std::vector<std::string> words = invocation.args;
    std::vector<char*> argv = argv_of(binary, words);
    ::execv(binary.c_str(), argv.data());
    const std::string why = "harness: cannot run " + binary + ": " + std::strerror(errno) + "\n";
    (void)!::write(STDERR_FILENO, why.data(), why.size());
    ::_exit(127);
  });
}

Invocation parse_command_line(std::string_view line) {
  Invocation invocation;
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  auto refuse = [&](char c) {
    throw std::invalid_argument(std::string("parse_command_line: '") + c +
                                "' needs a shell in: " + std::string(line.substr(0, 200)));
  };
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
    } else if (c == '\'') {
      const size_t close = line.find('\'', i + 1);
      if (close == std::string_view::npos) refuse(c);
      word.append(line.substr(i + 1, close - i - 1));
      i = close;
      in_word = true;
    } else if (c == '"') {
      size_t j = i + 1;
      for (; j < line.size() && line[j] != '"'; ++j) {
        if (line[j] == '$' || line[j] == '`') refuse(line[j]);
        if (line[j] == '\\' && j + 1 < line.size() && std::strchr("\"\\$`", line[j + 1])) ++j;
        word += line[j];
      }
      if (j == line.size()) refuse(c);
      i = j;
      in_word = true;
    } else if (c == '\\') {
      if (i + 1 == line.size()) refuse(c);
      word += line[++i];
      in_word = true;
    } else if (std::strchr("|&;()<>$`*?[#~", c) != nullptr) {
      // `<` alone as a word: stdin from the next word. '#', '~' and '[' only start something
      // at a word's start, but the tests have no use for them anywhere.
      if (c == '<' && !in_word) {
        words.push_back("<");
        continue;
      }
      refuse(c);
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) words.push_back(std::move(word));
  for (size_t i = 0; i < words.size(); ++i) {
    if (words[i] != "<") {
      invocation.args.push_back(std::move(words[i]));
    } else if (i + 1 < words.size() && words[i + 1] != "<") {
      invocation.stdin_path = words[++i];
    } else {
      refuse('<');
    }
  }
  return invocation;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_file(const std::string& path, std::string_view text) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  std::ofstream(path, std::ios::binary) << text;
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

}  // namespace kvlab::test
