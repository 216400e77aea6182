#include "kernels/thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>

namespace kvlab {
namespace {

constexpr int kItemBits = 24;
constexpr uint64_t kItemMask = (uint64_t{1} << kItemBits) - 1;
constexpr int64_t kMaxItems = static_cast<int64_t>(kItemMask);

uint64_t job_of(uint64_t word) { return word >> (2 * kItemBits); }
int64_t items_of(uint64_t word) { return static_cast<int64_t>((word >> kItemBits) & kItemMask); }
int64_t next_of(uint64_t word) { return static_cast<int64_t>(word & kItemMask); }

}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { work(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true);
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::run_items(uint64_t job) {
  uint64_t word = word_.load(std::memory_order_acquire);
  while (job_of(word) == job && next_of(word) < items_of(word)) {
    if (!word_.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel,
                                     std::memory_order_acquire)) {
      continue;  // word now holds the current value
    }
    call_(ctx_, next_of(word));
    finished_.fetch_add(1, std::memory_order_acq_rel);
    word = word_.load(std::memory_order_acquire);
  }
}

void ThreadPool::work() {
  uint64_t seen = 0;
  while (true) {
    auto spin_start = std::chrono::steady_clock::now();
    uint64_t job = job_of(word_.load(std::memory_order_acquire));
    for (int64_t spins = 0; job == seen && !stop_.load(std::memory_order_relaxed); ++spins) {
      _mm_pause();
      if (spins % 64 == 63 &&
          std::chrono::steady_clock::now() - spin_start > std::chrono::microseconds(kSpinMicros)) {
        std::unique_lock<std::mutex> lock(mutex_);
        sleepers_.fetch_add(1);  // seq_cst, paired with run(): one of us sees the other
        wake_.wait(lock, [&] { return stop_.load() || job_of(word_.load()) != seen; });
        sleepers_.fetch_sub(1);
        spin_start = std::chrono::steady_clock::now();
      }
      job = job_of(word_.load(std::memory_order_acquire));
    }
    if (stop_.load()) return;
    seen = job;
    run_items(job);
  }
}

void ThreadPool::run(int64_t n, Call call, void* ctx) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1) {
    for (int64_t i = 0; i < n; ++i) call(ctx, i);
    return;
  }
  for (int64_t first = 0; first < n; first += kMaxItems) {  // at most kMaxItems per job
    const int64_t items = std::min(kMaxItems, n - first);
    struct Offset {
      Call call;
      void* ctx;
      int64_t first;
    } offset{call, ctx, first};
    call_ = first == 0 ? call : [](void* o, int64_t i) {
      auto* off = static_cast<Offset*>(o);
      off->call(off->ctx, off->first + i);
    };
    ctx_ = first == 0 ? ctx : &offset;
    finished_.store(0, std::memory_order_relaxed);
    job_ = (job_ + 1) & 0xFFFF;
    if (job_ == 0) job_ = 1;  // workers start having seen job 0
    word_.store((job_ << (2 * kItemBits)) | (static_cast<uint64_t>(items) << kItemBits));
    if (sleepers_.load() > 0) {
      std::lock_guard<std::mutex> lock(mutex_);  // a worker between its check and its wait
      wake_.notify_all();
    }
    run_items(job_);
    while (finished_.load(std::memory_order_acquire) < items) _mm_pause();
  }
}

}  // namespace kvlab
