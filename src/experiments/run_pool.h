#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <string>

namespace kvlab {

struct RunPoolResult {
  size_t finished = 0;  // runs whose function returned true
  std::string failure;  // the first failure ("" if none): its exception's message
};

// Runs run(i) for i in [0, n) on `jobs` threads, in order of i. A run returns true when it
// finished, false when it stopped early (interrupted). The pool stops handing out runs after
// the first exception or once *stop is true; runs in flight complete.
RunPoolResult run_pool(size_t n, int jobs, const std::atomic<bool>* stop,
                       const std::function<bool(size_t)>& run);

}  // namespace kvlab
