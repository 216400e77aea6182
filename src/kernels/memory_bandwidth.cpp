#include "kernels/memory_bandwidth.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <thread>

namespace kvlab {
namespace {

// Four independent accumulators keep several loads in flight; the compiler vectorises it.
uint64_t sum_words(const uint64_t* data, int64_t n) {
  uint64_t a = 0, b = 0, c = 0, d = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    a += data[i];
    b += data[i + 1];
    c += data[i + 2];
    d += data[i + 3];
  }
  for (; i < n; ++i) a += data[i];
  return a + b + c + d;
}

}  // namespace

double BandwidthResult::median() const {
  std::vector<double> sorted = gb_per_s;
  std::sort(sorted.begin(), sorted.end());
  return sorted.empty() ? 0.0 : sorted[sorted.size() / 2];
}

double BandwidthResult::min() const {
  return gb_per_s.empty() ? 0.0 : *std::min_element(gb_per_s.begin(), gb_per_s.end());
}

double BandwidthResult::max() const {
  return gb_per_s.empty() ? 0.0 : *std::max_element(gb_per_s.begin(), gb_per_s.end());
}

BandwidthResult measure_read_bandwidth(int64_t bytes, int threads, int repeats) {
  if (bytes < 4096 || threads <= 0 || repeats <= 0) {
    throw std::invalid_argument("bandwidth: bytes >= 4096, threads > 0 and repeats > 0");
  }
  const int64_t words = bytes / 8;
  std::unique_ptr<uint64_t, void (*)(void*)> buffer(
      static_cast<uint64_t*>(std::aligned_alloc(64, static_cast<size_t>(words * 8))), std::free);
  if (!buffer) throw std::runtime_error("bandwidth: cannot allocate the buffer");
  for (int64_t i = 0; i < words; ++i) buffer.get()[i] = static_cast<uint64_t>(i);
  BandwidthResult result;
  result.bytes = words * 8;
  result.threads = threads;
  std::vector<uint64_t> sums(static_cast<size_t>(threads));
  for (int r = 0; r < repeats + 1; ++r) {  // the first pass is a warm-up
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    const int64_t slice = words / threads;
    for (int t = 0; t < threads; ++t) {
      const int64_t begin = t * slice;
      const int64_t n = t == threads - 1 ? words - begin : slice;
      pool.emplace_back(
          [&, t, begin, n] { sums[static_cast<size_t>(t)] = sum_words(buffer.get() + begin, n); });
    }
    for (std::thread& th : pool) th.join();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    uint64_t total = 0;
    for (uint64_t s : sums) total += s;
    const uint64_t expected = static_cast<uint64_t>(words) * static_cast<uint64_t>(words - 1) / 2;
    if (total != expected) throw std::logic_error("bandwidth: the buffer was not read correctly");
    if (r > 0) result.gb_per_s.push_back(static_cast<double>(result.bytes) / seconds / 1e9);
  }
  return result;
}

}  // namespace kvlab
