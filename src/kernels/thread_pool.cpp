#include "kernels/thread_pool.h"

namespace kvlab {

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { work(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::work() {
  uint64_t seen = 0;
  while (true) {
    std::unique_lock<std::mutex> lock(mutex_);
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    while (next_ < total_) {
      const int64_t i = next_++;
      const Call call = call_;
      void* ctx = ctx_;
      lock.unlock();
      call(ctx, i);
      lock.lock();
      if (++finished_ == total_) done_.notify_all();
    }
  }
}

void ThreadPool::run(int64_t n, Call call, void* ctx) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1) {
    for (int64_t i = 0; i < n; ++i) call(ctx, i);
    return;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  call_ = call;
  ctx_ = ctx;
  next_ = 0;
  total_ = n;
  finished_ = 0;
  ++generation_;
  wake_.notify_all();
  while (next_ < total_) {  // the caller works too
    const int64_t i = next_++;
    lock.unlock();
    call(ctx, i);
    lock.lock();
    if (++finished_ == total_) done_.notify_all();
  }
  done_.wait(lock, [&] { return finished_ == total_; });
  call_ = nullptr;
  ctx_ = nullptr;
}

}  // namespace kvlab
