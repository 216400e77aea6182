#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace kvlab {

// A fixed set of worker threads started once (a decode step must not spawn threads).
// parallel_for runs fn(i) for i in [0, n) across the workers and the caller, and returns
// when all are done.
//
// A decode step hands the pool dozens of small jobs (one per matrix-vector product), so
// hand-offs must cost little: idle workers spin on the job word for kSpinMicros before they
// sleep on a condition variable, and the caller spins while the last items finish. Items are
// claimed by compare-and-swap on one word holding (job, item count, next item), so a worker
// that wakes late can never claim an item of a job that is over.
class ThreadPool {
 public:
  explicit ThreadPool(int threads);  // threads <= 0: all cores
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // Runs fn(i) for i in [0, n). Takes the callable by reference and never copies it, so a
  // call allocates nothing (a std::function would, for a lambda with many captures).
  template <class F>
  void parallel_for(int64_t n, F&& fn) {
    run(
        n, [](void* ctx, int64_t i) { (*static_cast<std::remove_reference_t<F>*>(ctx))(i); },
        const_cast<void*>(static_cast<const void*>(&fn)));
  }

  // How long an idle worker spins before it sleeps: long enough to span the gaps between the
  // jobs of one decode step, short enough that an idle pool gives its cores back.
  static constexpr int64_t kSpinMicros = 300;

 private:
  using Call = void (*)(void*, int64_t);
  void run(int64_t n, Call call, void* ctx);
  void work();
  // Claims and runs items of job `job` until none is left.
  void run_items(uint64_t job);

  std::vector<std::thread> workers_;
  // [job: 16 bits][items: 24 bits][next item: 24 bits]
  std::atomic<uint64_t> word_{0};
  std::atomic<int64_t> finished_{0};
  Call call_ = nullptr;
  void* ctx_ = nullptr;
  uint64_t job_ = 0;  // the caller's last job number
  std::atomic<bool> stop_{false};
  std::atomic<int> sleepers_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
};

}  // namespace kvlab
