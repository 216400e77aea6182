#include "serve/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

namespace kvlab::serve {

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)), counts_(upper_bounds_.size() + 1, 0) {
  if (!std::is_sorted(upper_bounds_.begin(), upper_bounds_.end()) ||
      std::adjacent_find(upper_bounds_.begin(), upper_bounds_.end()) != upper_bounds_.end()) {
    throw std::invalid_argument("histogram: bucket bounds must increase");
  }
}

void Histogram::observe(double value) {
  const size_t bucket = static_cast<size_t>(
      std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value) - upper_bounds_.begin());
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

namespace {

// A sample value as Prometheus reads it: the shortest decimal that reads back the same (80, 0.25,
// 1000.008), +Inf / -Inf / NaN.
std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char text[64];
  const auto [end, error] = std::to_chars(text, text + sizeof text, v);
  return error == std::errc() ? std::string(text, end) : std::to_string(v);
}

void header(std::string& out, const std::string& name, const char* type, const char* help) {
  out += "# HELP " + name + " " + help + "\n";
  out += "# TYPE " + name + " " + type + "\n";
}

void gauge(std::string& out, const char* name, double value, const char* help) {
  const std::string n = std::string("kvlab:") + name;
  header(out, n, "gauge", help);
  out += n + " " + number(value) + "\n";
}

void counter(std::string& out, const char* name, int64_t value, const char* help) {
  const std::string n = std::string("kvlab:") + name + "_total";
  header(out, n, "counter", help);
  out += n + " " + std::to_string(value) + "\n";
}

void histogram(std::string& out, const char* name, const Histogram& h, const char* help) {
  const std::string n = std::string("kvlab:") + name;
  header(out, n, "histogram", help);
  int64_t cumulative = 0;
  for (size_t i = 0; i < h.upper_bounds().size(); ++i) {
    cumulative += h.bucket_counts()[i];
    out += n + "_bucket{le=\"" + number(h.upper_bounds()[i]) + "\"} " + std::to_string(cumulative) +
           "\n";
  }
  out += n + "_bucket{le=\"+Inf\"} " + std::to_string(h.count()) + "\n";
  out += n + "_sum " + number(h.sum()) + "\n";
  out += n + "_count " + std::to_string(h.count()) + "\n";
}

}  // namespace

std::string render_prometheus(const EngineMetrics& m) {
  std::string out;
  gauge(out, "num_requests_running", static_cast<double>(m.num_requests_running),
        "Requests whose sequences are in the running batch.");
  gauge(out, "num_requests_waiting", static_cast<double>(m.num_requests_waiting),
        "Requests waiting to be admitted (preempted ones included).");
  gauge(out, "kv_cache_usage_perc", m.kv_cache_usage_perc,
        "Fraction of the KV cache pages held by requests (1 = full).");
  counter(out, "prefix_cache_queries", m.prefix_cache_queries,
          "Prompt tokens looked up in the prefix cache, at admission.");
  counter(out, "prefix_cache_hits", m.prefix_cache_hits,
          "Prompt tokens found in the prefix cache, at admission.");
  counter(out, "num_preemptions", m.num_preemptions,
          "Sequences preempted (pages freed, to be recomputed).");
  counter(out, "prompt_tokens", m.prompt_tokens, "Prompt tokens of the requests prefilled.");
  counter(out, "generation_tokens", m.generation_tokens, "Tokens generated.");
  const std::string success = "kvlab:request_success_total";
  header(out, success, "counter", "Requests ended, by finish reason.");
  for (const char* reason : {"stop", "length", "cancelled"}) {
    const auto found = m.request_success.find(reason);
    out += success + "{finished_reason=\"" + reason + "\"} " +
           std::to_string(found == m.request_success.end() ? 0 : found->second) + "\n";
  }
  histogram(out, "time_to_first_token_seconds", m.time_to_first_token_seconds,
            "Seconds from a request's arrival to its first token.");
  histogram(out, "inter_token_latency_seconds", m.inter_token_latency_seconds,
            "Seconds between a request's consecutive tokens.");
  histogram(out, "e2e_request_latency_seconds", m.e2e_request_latency_seconds,
            "Seconds from a request's arrival to its end.");
  return out;
}

}  // namespace kvlab::serve
