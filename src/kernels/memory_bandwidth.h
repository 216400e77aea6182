#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/thread_pool.h"

namespace kvlab {

// Streaming read bandwidth of this machine: `threads` threads each sum their slice of a
// buffer of `bytes` (touched first, so pages are resident), repeated; the ceiling decode
// benchmarks are measured against.
struct BandwidthResult {
  int64_t bytes = 0;
  int threads = 0;
  std::vector<double> gb_per_s;  // one per repeat, in run order
  double median() const;
  double min() const;
  double max() const;
};

BandwidthResult measure_read_bandwidth(int64_t bytes, int threads, int repeats);

// One buffer, read on demand: for benchmarks that sample the bandwidth between their own
// steps (and so also evict the last-level cache between them).
class BandwidthProbe {
 public:
  BandwidthProbe(int64_t bytes, int threads);
  // One streaming read of the whole buffer by all threads, in GB/s (10^9 B/s).
  double read_gb_per_s();
  // The same on a pool's threads (its size, not the probe's): a benchmark that reads the probe
  // between steps of a kernel on that pool keeps its threads where the kernel runs. (Fresh
  // threads each read left the pool's worker waking up on a busy core: the next step ran
  // ~5 ms slower at 16k tokens.)
  double read_gb_per_s(ThreadPool& pool);
  int64_t bytes() const { return words_ * 8; }

 private:
  std::unique_ptr<uint64_t, void (*)(void*)> buffer_;
  int64_t words_ = 0;
  int threads_ = 1;
  std::vector<uint64_t> sums_;
};

}  // namespace kvlab
