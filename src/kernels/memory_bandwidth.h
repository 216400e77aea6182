#pragma once

#include <cstdint>
#include <vector>

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

}  // namespace kvlab
