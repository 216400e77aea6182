// kvlab: attention variants that keep less in the KV cache. The program is run_kvlab();
// this file only makes sure libgomp starts with sleeping workers.
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <iostream>

#include "cli/run_kvlab.h"

namespace {

// Idle OpenMP workers must sleep, not spin: on 2 cores a spinning pool makes 2 threads slower
// than 1. libgomp reads OMP_WAIT_POLICY once, in its load-time constructor, so setting it in
// main() is too late, and so is setenv() from the executable's .preinit_array (which runs before
// the libraries' constructors): libc's own initialisation then resets the environment to the
// one the process started with. So when the variable is unset, the preinit function executes
// the program again with OMP_WAIT_POLICY=passive added, before any library constructor has run
// (about 40 ms of dynamic loading). A user's own setting is kept; if the exec fails, the
// program goes on with libgomp's default.
void exec_again_with_passive_omp_workers(int, char** argv, char** envp) {
  constexpr char kName[] = "OMP_WAIT_POLICY=";
  size_t n = 0;
  for (; envp != nullptr && envp[n] != nullptr; ++n) {
    if (std::strncmp(envp[n], kName, sizeof(kName) - 1) == 0) return;
  }
  auto** env = static_cast<char**>(std::malloc((n + 2) * sizeof(char*)));
  if (env == nullptr) return;
  for (size_t i = 0; i < n; ++i) env[i] = envp[i];
  env[n] = const_cast<char*>("OMP_WAIT_POLICY=passive");
  env[n + 1] = nullptr;
  ::execve("/proc/self/exe", argv, env);
  std::free(env);  // the exec failed: run on with the default policy
}

}  // namespace

__attribute__((section(".preinit_array"), used)) static void (*const kPreinitOmpWaitPolicy)(
    int, char**, char**) = &exec_again_with_passive_omp_workers;

int main(int argc, char** argv) {
  return kvlab::run_kvlab(argc, argv, std::cin, std::cout, std::cerr);
}
