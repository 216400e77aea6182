#include "kernels/memory_bandwidth.h"

#include <immintrin.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>

#include "report/statistics.h"

namespace kvlab {
namespace {

constexpr int64_t kLineWords = 8;  // 64-byte cache lines

// The sum of n words read as S equal parts side by side, a line of each in turn (each part its
// own accumulators, so the loads stay independent); the words past the parts' whole lines are
// read after. With AVX2 a line is two 32-byte loads: the probe must not be limited by its own
// instructions (plain scalar code measured below the bandwidth it was to measure). kAheadBytes >
// 0: each line of a part prefetched that far ahead in it, as the panel kernels prefetch.
template <int S, int64_t kAheadBytes>
__attribute__((target("avx2"))) uint64_t sum_words_avx2(const uint64_t* data, int64_t n) {
  const int64_t part = n / S / kLineWords * kLineWords;
  __m256i low[S], high[S];
  for (int s = 0; s < S; ++s) low[s] = high[s] = _mm256_setzero_si256();
  for (int64_t i = 0; i < part; i += kLineWords) {
    for (int s = 0; s < S; ++s) {
      const auto* line = reinterpret_cast<const __m256i*>(data + s * part + i);
      if constexpr (kAheadBytes > 0) {
        _mm_prefetch(reinterpret_cast<const char*>(line) + kAheadBytes, _MM_HINT_T0);
      }
      low[s] = _mm256_add_epi64(low[s], _mm256_loadu_si256(line));
      high[s] = _mm256_add_epi64(high[s], _mm256_loadu_si256(line + 1));
    }
  }
  alignas(32) uint64_t lanes[4];
  uint64_t total = 0;
  for (int s = 0; s < S; ++s) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), _mm256_add_epi64(low[s], high[s]));
    total += lanes[0] + lanes[1] + lanes[2] + lanes[3];
  }
  for (int64_t i = S * part; i < n; ++i) total += data[i];
  return total;
}

template <int S, int64_t kAheadBytes>
uint64_t sum_words_plain(const uint64_t* data, int64_t n) {
  const int64_t part = n / S / kLineWords * kLineWords;
  uint64_t sums[S] = {};
  for (int64_t i = 0; i < part; i += kLineWords) {
    for (int s = 0; s < S; ++s) {
      if constexpr (kAheadBytes > 0) {
        __builtin_prefetch(reinterpret_cast<const char*>(data + s * part + i) + kAheadBytes);
      }
      for (int64_t w = 0; w < kLineWords; ++w) sums[s] += data[s * part + i + w];
    }
  }
  uint64_t total = 0;
  for (int s = 0; s < S; ++s) total += sums[s];
  for (int64_t i = S * part; i < n; ++i) total += data[i];
  return total;
}

template <int S, int64_t kAheadBytes>
uint64_t sum_words(const uint64_t* data, int64_t n) {
  return __builtin_cpu_supports("avx2") ? sum_words_avx2<S, kAheadBytes>(data, n)
                                        : sum_words_plain<S, kAheadBytes>(data, n);
}

template <int64_t kAheadBytes>
uint64_t sum_words(const uint64_t* data, int64_t n, int streams) {
  switch (streams) {
    case 1:
      return sum_words<1, kAheadBytes>(data, n);
    case 2:
      return sum_words<2, kAheadBytes>(data, n);
    case 4:
      return sum_words<4, kAheadBytes>(data, n);
    case 8:
      return sum_words<8, kAheadBytes>(data, n);
    default:
      throw std::invalid_argument("bandwidth: streams must be 1, 2, 4 or 8");
  }
}

// The patterns the ceiling reads, the fastest taken.
constexpr ReadPattern kCeilingPatterns[] = {{1, false}, {4, false}, {4, true}};

}  // namespace

bool probe_takes_streams(int streams) {
  return streams == kCeilingStreams || streams == 1 || streams == 2 || streams == 4 || streams == 8;
}

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

double BandwidthProbe::read_gb_per_s(ThreadPool& pool, int streams) {
  if (!probe_takes_streams(streams)) {
    throw std::invalid_argument("bandwidth: streams must be 1, 2, 4 or 8");
  }
  if (streams != kCeilingStreams) return read_gb_per_s(pool, ReadPattern{streams, false});
  double fastest = 0;
  for (const ReadPattern& pattern : kCeilingPatterns) {
    fastest = std::max(fastest, read_gb_per_s(pool, pattern));
  }
  return fastest;
}

double BandwidthProbe::read_gb_per_s(ThreadPool& pool, ReadPattern pattern) {
  const int streams = pattern.streams;
  if (!probe_takes_streams(streams) || streams == kCeilingStreams) {
    throw std::invalid_argument("bandwidth: a pattern's streams must be 1, 2, 4 or 8");
  }
  const int64_t parts = pool.size();
  std::vector<uint64_t>& sums = sums_;
  if (static_cast<int64_t>(sums.size()) < parts) sums.resize(static_cast<size_t>(parts));
  const auto start = std::chrono::steady_clock::now();
  const int64_t slice = words_ / parts;
  pool.parallel_for(parts, [&](int64_t t) {
    const int64_t begin = t * slice;
    const int64_t n = t == parts - 1 ? words_ - begin : slice;
    sums[static_cast<size_t>(t)] =
        pattern.prefetch ? sum_words<kProbeAheadBytes>(buffer_.get() + begin, n, streams)
                         : sum_words<0>(buffer_.get() + begin, n, streams);
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  uint64_t total = 0;
  for (int64_t t = 0; t < parts; ++t) total += sums[static_cast<size_t>(t)];
  const uint64_t expected = static_cast<uint64_t>(words_) * static_cast<uint64_t>(words_ - 1) / 2;
  if (total != expected) throw std::logic_error("bandwidth: the buffer was not read correctly");
  return static_cast<double>(bytes()) / seconds / 1e9;
}

BandwidthResult measure_read_bandwidth(int64_t bytes, int threads, int repeats, int streams) {
  if (repeats <= 0 || threads <= 0) {
    throw std::invalid_argument("bandwidth: repeats > 0 and threads > 0");
  }
  BandwidthProbe probe(bytes);
  ThreadPool pool(threads);
  // the ceiling: every pattern, their passes alternating (the machine drifts), the fastest median
  const std::vector<ReadPattern> patterns =
      streams == kCeilingStreams
          ? std::vector<ReadPattern>(std::begin(kCeilingPatterns), std::end(kCeilingPatterns))
          : std::vector<ReadPattern>{{streams, false}};
  std::vector<BandwidthResult> results(patterns.size());
  for (size_t i = 0; i < patterns.size(); ++i) {
    results[i].bytes = probe.bytes();
    results[i].threads = threads;
    results[i].streams = patterns[i].streams;
    results[i].prefetch_bytes = patterns[i].prefetch ? kProbeAheadBytes : 0;
    probe.read_gb_per_s(pool, patterns[i]);  // warm-up
  }
  for (int r = 0; r < repeats; ++r) {
    for (size_t i = 0; i < patterns.size(); ++i) {
      results[i].gb_per_s.push_back(probe.read_gb_per_s(pool, patterns[i]));
    }
  }
  return *std::max_element(
      results.begin(), results.end(),
      [](const BandwidthResult& a, const BandwidthResult& b) { return a.median() < b.median(); });
}

int64_t last_level_cache_bytes() {
  for (const int level : {_SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE}) {
    const long bytes = sysconf(level);
    if (bytes > 0) return bytes;
  }
  return 0;
}

}  // namespace kvlab
