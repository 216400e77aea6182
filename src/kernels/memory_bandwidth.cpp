#include "kernels/memory_bandwidth.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "report/statistics.h"

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

double BandwidthResult::median() const { return median_of(gb_per_s); }
double BandwidthResult::min() const { return min_of(gb_per_s); }
double BandwidthResult::max() const { return max_of(gb_per_s); }

BandwidthProbe::BandwidthProbe(int64_t bytes) : buffer_(nullptr, std::free), words_(bytes / 8) {
  if (bytes < 4096) throw std::invalid_argument("bandwidth: bytes >= 4096");
  // Transparent huge pages, as the KV cache asks for: the ceiling should not include page walks
  // the kernels measured against it do not pay.
  const int64_t huge = int64_t{2} << 20;
  const int64_t allocated = (words_ * 8 + huge - 1) / huge * huge;
  buffer_.reset(static_cast<uint64_t*>(std::aligned_alloc(huge, static_cast<size_t>(allocated))));
  if (!buffer_) throw std::runtime_error("bandwidth: cannot allocate the buffer");
  madvise(buffer_.get(), static_cast<size_t>(allocated), MADV_HUGEPAGE);
  for (int64_t i = 0; i < words_; ++i) buffer_.get()[i] = static_cast<uint64_t>(i);
}

double BandwidthProbe::read_gb_per_s(ThreadPool& pool) {
  const int64_t parts = pool.size();
  std::vector<uint64_t>& sums = sums_;
  if (static_cast<int64_t>(sums.size()) < parts) sums.resize(static_cast<size_t>(parts));
  const auto start = std::chrono::steady_clock::now();
  const int64_t slice = words_ / parts;
  pool.parallel_for(parts, [&](int64_t t) {
    const int64_t begin = t * slice;
    const int64_t n = t == parts - 1 ? words_ - begin : slice;
    sums[static_cast<size_t>(t)] = sum_words(buffer_.get() + begin, n);
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  uint64_t total = 0;
  for (int64_t t = 0; t < parts; ++t) total += sums[static_cast<size_t>(t)];
  const uint64_t expected = static_cast<uint64_t>(words_) * static_cast<uint64_t>(words_ - 1) / 2;
  if (total != expected) throw std::logic_error("bandwidth: the buffer was not read correctly");
  return static_cast<double>(bytes()) / seconds / 1e9;
}

BandwidthResult measure_read_bandwidth(int64_t bytes, int threads, int repeats) {
  if (repeats <= 0 || threads <= 0) {
    throw std::invalid_argument("bandwidth: repeats > 0 and threads > 0");
  }
  BandwidthProbe probe(bytes);
  ThreadPool pool(threads);
  BandwidthResult result;
  result.bytes = probe.bytes();
  result.threads = threads;
  probe.read_gb_per_s(pool);  // warm-up
  for (int r = 0; r < repeats; ++r) result.gb_per_s.push_back(probe.read_gb_per_s(pool));
  return result;
}

}  // namespace kvlab
