#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kvlab::serve {

// A Prometheus histogram: counts of observations at or below each bucket's upper bound (the
// exposition's cumulative `le` buckets are made when rendered), their sum and count.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  const std::vector<double>& upper_bounds() const { return upper_bounds_; }
  // observations in (bound[i-1], bound[i]]; the last entry: above every bound
  const std::vector<int64_t>& bucket_counts() const { return counts_; }
  double sum() const { return sum_; }
  int64_t count() const { return count_; }

 private:
  std::vector<double> upper_bounds_;
  std::vector<int64_t> counts_;
  double sum_ = 0;
  int64_t count_ = 0;
};

// What the serving engine reports, with the names and meanings of vLLM's metrics under a
// `kvlab:` prefix: requests running and waiting, the KV cache's used fraction, prefix-cache
// queries and hits (tokens), preemptions, prompt and generated tokens, requests ended by reason,
// and the latency histograms (seconds): time to first token, between tokens, end to end.
struct EngineMetrics {
  int64_t num_requests_running = 0;
  int64_t num_requests_waiting = 0;
  double kv_cache_usage_perc = 0;  // a fraction, 0..1, as vLLM's
  int64_t prefix_cache_queries = 0;
  int64_t prefix_cache_hits = 0;
  int64_t num_preemptions = 0;
  int64_t prompt_tokens = 0;
  int64_t generation_tokens = 0;
  std::map<std::string, int64_t> request_success;  // by finish reason: stop, length, cancelled
  Histogram time_to_first_token_seconds{{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                         0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}};
  Histogram inter_token_latency_seconds{{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
                                         0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}};
  Histogram e2e_request_latency_seconds{
      {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0}};
};

// The Prometheus text exposition format (version 0.0.4): # HELP and # TYPE, counters with the
// _total suffix, histograms as cumulative _bucket{le=...} lines with +Inf, _sum and _count.
std::string render_prometheus(const EngineMetrics& metrics);

}  // namespace kvlab::serve
