#pragma once
// One way for the tests to run the program and see what a user sees: the exit code (or the
// signal), stdout and stderr. Two ways to start it:
// - run_forked: the program's main, linked into the test binary, run in a forked child of the
//   test process. Its libraries are loaded and initialised once, in the parent; each run still
//   has a process of its own (a crash, a sanitizer report or an exit ends only the child), with
//   its own stdin, stdout and stderr.
// - run_exec: a real fork + exec of a binary, for what needs a fresh program: signals sent from
//   outside, re-execution, strace, other builds.
// The parent must not start threads (an OpenMP or libtorch pool) before it forks: a child gets
// only the forking thread, so a pool it inherits would hang.
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace kvlab::test {

struct ProcessResult {
  int exit_code = -1;      // the exit status, or -N when signal N ended the process
  bool timed_out = false;  // killed (SIGKILL) after the invocation's timeout
  std::string out;
  std::string err;
};

struct Invocation {
  std::vector<std::string> args;  // argv[1], argv[2], ...
  std::string stdin_path = "/dev/null";
  std::string cwd;  // empty: the test process's
  double timeout_s = 600;
};

// The program's entry point: argv[0] is its name, argv[argc] is null.
using ProgramMain = std::function<int(int argc, char** argv)>;

// Runs `program` in a forked child with the invocation's argv, stdin and folder; the child
// flushes C and C++ streams and _exits with what `program` returned.
ProcessResult run_forked(const ProgramMain& program, const std::string& name,
                         const Invocation& invocation);

// run_forked with the child traced from before its first step by `tracer` (a command: its path,
// then its arguments; "-p PID" is added), which attaches while the child waits stopped: the
// tracer sees the program's run and not the loading of its libraries. For strace's syscall
// counts and fault injection without a fresh exec each time.
ProcessResult run_forked_traced(const ProgramMain& program, const std::string& name,
                                const Invocation& invocation,
                                const std::vector<std::string>& tracer);

// Runs `binary` (a path) with the invocation's argv, stdin and folder, in this environment.
ProcessResult run_exec(const std::string& binary, const Invocation& invocation);

// A command line as the tests write it, split into words as sh splits them — blanks, '…' and
// "…" quoting, backslash escapes — with `< PATH` taken as stdin. Anything else a shell would
// interpret (pipes, other redirections, $, `, globs, ;, &) is refused with
// std::invalid_argument: such a line needs a real shell (run_exec of /bin/sh).
Invocation parse_command_line(std::string_view line);

std::string slurp(const std::string& path);
void write_file(const std::string& path, std::string_view text);  // creates the folders above
std::string first_line(const std::string& text);

}  // namespace kvlab::test
