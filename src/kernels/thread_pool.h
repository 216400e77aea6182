#pragma once

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

 private:
  using Call = void (*)(void*, int64_t);
  void run(int64_t n, Call call, void* ctx);
  void work();

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  Call call_ = nullptr;
  void* ctx_ = nullptr;
  int64_t next_ = 0;
  int64_t total_ = 0;
  int64_t finished_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

}  // namespace kvlab
