#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/thread_pool.h"

namespace kvlab {

// Streaming read bandwidth of this machine: `threads` threads each sum their slice of a
// buffer of `bytes` (touched first, so pages are resident), repeated; the ceiling decode
// benchmarks are measured against. Each thread reads its slice as `streams` equal parts side by
// side, a cache line of each in turn: the hardware prefetchers keep more lines in flight for
// several streams than for one (on a Zen 5 VM four streams a thread measured faster than one
// with two threads, and no faster with one: docs/kernels/dense-decode.md); the decode kernels
// read their weights in four runs (walk_rows). kCeilingStreams: one stream, four, and four with
// each line prefetched kProbeAheadBytes ahead (as the panel kernels prefetch their weights; on
// the Zen 5 VM that read 7–19% faster than four streams alone, and the kernels' batch-1 steps
// had passed the plain reads), the fastest taken: the ceiling.
constexpr int kCeilingStreams = 0;
bool probe_takes_streams(int streams);  // 1, 2, 4, 8, or kCeilingStreams
constexpr int64_t kProbeAheadBytes = 1024;

// How the probe reads a thread's slice: `streams` parts side by side (1, 2, 4 or 8), each line
// prefetched kProbeAheadBytes ahead or not.
struct ReadPattern {
  int streams = 4;
  bool prefetch = false;
};

struct BandwidthResult {
  int64_t bytes = 0;
  int threads = 0;
  int streams = 0;               // of the pattern measured (for the ceiling: the fastest one)
  int64_t prefetch_bytes = 0;    // how far ahead that pattern prefetched (0: it did not)
  std::vector<double> gb_per_s;  // one per repeat, in run order
  double median() const;
  double min() const;
  double max() const;
};

BandwidthResult measure_read_bandwidth(int64_t bytes, int threads, int repeats,
                                       int streams = kCeilingStreams);

// The last-level cache this CPU reports (its L3, else its L2), bytes; 0 where it reports none.
// Data that fits in it is read from it after its first pass: for a decode step whose weights fit,
// the memory's bandwidth is not the ceiling. A virtual machine reports what its hypervisor passes
// on, which can be more than one core can use (480 and 508 MiB on two VMs where a core's share is
// far smaller), so a row said to fit may not.
int64_t last_level_cache_bytes();

// One buffer (on transparent huge pages), read on demand on a pool's threads: for benchmarks
// that sample the bandwidth between steps of kernels on that pool (and so also evict the
// last-level cache between them).
class BandwidthProbe {
 public:
  explicit BandwidthProbe(int64_t bytes);
  // One streaming read of the whole buffer, split over the pool's threads (each reading
  // `streams` parts side by side), in GB/s (10^9 B/s); for kCeilingStreams one read of each of
  // the ceiling's patterns, the fastest.
  double read_gb_per_s(ThreadPool& pool, int streams = kCeilingStreams);
  double read_gb_per_s(ThreadPool& pool, ReadPattern pattern);
  int64_t bytes() const { return words_ * 8; }

 private:
  std::unique_ptr<uint64_t, void (*)(void*)> buffer_;
  int64_t words_ = 0;
  std::vector<uint64_t> sums_;
};

}  // namespace kvlab
