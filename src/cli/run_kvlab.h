#pragma once

#include <istream>
#include <ostream>

namespace kvlab {

// The whole kvlab program: parses argv (argv[0] is the program's name), runs the subcommand and
// returns the process's exit code — 0, 2 for bad input (the message on `err`), 130 after
// Ctrl-C. Subcommands read `in` and print to `out`; progress and notes go to the process's
// stderr. Installs the process's interrupt handlers, so one call per process: a test that runs
// it many times forks first (tests/harness/process.h).
int run_kvlab(int argc, char** argv, std::istream& in, std::ostream& out, std::ostream& err);

}  // namespace kvlab
