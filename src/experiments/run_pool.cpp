#include "experiments/run_pool.h"

#include <algorithm>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace kvlab {

RunPoolResult run_pool(size_t n, int jobs, const std::atomic<bool>* stop,
                       const std::function<bool(size_t)>& run) {
  RunPoolResult result;
  std::mutex mutex;
  size_t next = 0;
  auto worker = [&] {
    while (true) {
      size_t i;
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (next >= n || !result.failure.empty() || (stop && stop->load())) return;
        i = next++;
      }
      try {
        const bool done = run(i);
        std::lock_guard<std::mutex> lock(mutex);
        if (done) ++result.finished;
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mutex);
        if (result.failure.empty()) result.failure = e.what();
      }
    }
  };
  std::vector<std::thread> threads;
  const int workers = std::max(1, std::min<int>(jobs, static_cast<int>(std::max<size_t>(n, 1))));
  for (int j = 0; j < workers; ++j) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
  return result;
}

}  // namespace kvlab
