#include "nn/threads.h"

#include <dlfcn.h>
#include <torch/torch.h>

#include <algorithm>
#include <thread>

namespace kvlab::nn {

int set_threads(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  torch::set_num_threads(threads);
  // OpenBLAS keeps its own pool; find its setter in whichever BLAS libtorch loaded.
  using SetThreads = void (*)(int);
  if (auto* set = reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    set(threads);
  }
  return threads;
}

}  // namespace kvlab::nn
