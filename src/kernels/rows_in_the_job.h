#pragma once

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace kvlab {

// x's rows prepared for a product (rounded to q8_0 by the VNNI kernel over q8_0 and q4_0 panels)
// inside the product's own pool job, by whichever threads start its tasks, instead of before the
// job: on the calling thread alone below a size, or in a pool job of their own above it. Every
// task calls ready() first: it takes rows no task has taken yet, a few at a time, prepares them,
// and then waits until every row is ready (the rows it waits for are being prepared by a thread
// that took them, which never waits before it has; so prepare must not throw). The threads share
// the preparing, and a product costs one pool job, not two. bf16's rounding, a fraction of q8_0's
// work a row, gained nothing from it (docs/kernels/dense-decode.md, "The Zen 5 VM again: x rounded
// to q8_0 by the products' own tasks").
class RowsInTheJob {
 public:
  // rows of x; threads: the pool's
  RowsInTheJob(int64_t rows, int threads)
      : rows_(rows), per_take_(std::max<int64_t>(1, (rows + 4 * threads - 1) / (4 * threads))) {}
  RowsInTheJob(const RowsInTheJob&) = delete;
  RowsInTheJob& operator=(const RowsInTheJob&) = delete;

  // prepare(b) for the rows this thread takes; returns once all rows are prepared
  template <class Prepare>
  void ready(Prepare&& prepare) {
    if (ready_.load(std::memory_order_acquire) == rows_) return;
    for (;;) {
      const int64_t first = taken_.fetch_add(per_take_, std::memory_order_relaxed);
      if (first >= rows_) break;
      const int64_t last = std::min(rows_, first + per_take_);
      for (int64_t b = first; b < last; ++b) prepare(b);
      ready_.fetch_add(last - first, std::memory_order_release);
    }
    while (ready_.load(std::memory_order_acquire) < rows_) _mm_pause();
  }

 private:
  // apart, so that the threads spinning on ready_ do not slow the taking
  alignas(64) std::atomic<int64_t> taken_{0};
  alignas(64) std::atomic<int64_t> ready_{0};
  int64_t rows_;
  int64_t per_take_;
};

}  // namespace kvlab
