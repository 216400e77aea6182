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

// One buffer (on transparent huge pages), read on demand on a pool's threads: for benchmarks
// that sample the bandwidth between steps of kernels on that pool (and so also evict the
// last-level cache between them).
class BandwidthProbe {
 public:
  explicit BandwidthProbe(int64_t bytes);
  // One streaming read of the whole buffer, split over the pool's threads, in GB/s (10^9 B/s).
  double read_gb_per_s(ThreadPool& pool);
  int64_t bytes() const { return words_ * 8; }

 private:
  std::unique_ptr<uint64_t, void (*)(void*)> buffer_;
  int64_t words_ = 0;
  std::vector<uint64_t> sums_;
};

}  // namespace kvlab
