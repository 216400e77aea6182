// The engine's metrics in Prometheus's text format: names, types, the _total suffix of counters,
// cumulative histogram buckets ending at +Inf, and values that read back.
#include "serve/metrics.h"

#include <gtest/gtest.h>

#include <sstream>

namespace kvlab::serve {
namespace {

// The sample lines (no comments) as name → value text.
std::map<std::string, std::string> samples(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    out[line.substr(0, space)] = line.substr(space + 1);
  }
  return out;
}

TEST(MetricsTest, RendersThePrometheusTextFormat) {
  EngineMetrics m;
  m.num_requests_running = 3;
  m.kv_cache_usage_perc = 0.25;
  m.generation_tokens = 17;
  m.request_success["length"] = 2;
  m.time_to_first_token_seconds.observe(0.003);   // (0.001, 0.005]
  m.time_to_first_token_seconds.observe(0.005);   // on a bound: in its bucket
  m.time_to_first_token_seconds.observe(1000.0);  // above every bound
  const std::string text = render_prometheus(m);
  EXPECT_NE(text.find("# TYPE kvlab:num_requests_running gauge\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE kvlab:generation_tokens_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE kvlab:time_to_first_token_seconds histogram\n"), std::string::npos);
  const auto s = samples(text);
  EXPECT_EQ(s.at("kvlab:num_requests_running"), "3");
  EXPECT_EQ(s.at("kvlab:kv_cache_usage_perc"), "0.25");
  EXPECT_EQ(s.at("kvlab:generation_tokens_total"), "17");
  EXPECT_EQ(s.at("kvlab:request_success_total{finished_reason=\"length\"}"), "2");
  EXPECT_EQ(s.at("kvlab:request_success_total{finished_reason=\"stop\"}"), "0");
  EXPECT_EQ(s.at("kvlab:time_to_first_token_seconds_bucket{le=\"0.001\"}"), "0");
  EXPECT_EQ(s.at("kvlab:time_to_first_token_seconds_bucket{le=\"0.005\"}"), "2");
  EXPECT_EQ(s.at("kvlab:time_to_first_token_seconds_bucket{le=\"80\"}"), "2");
  EXPECT_EQ(s.at("kvlab:time_to_first_token_seconds_bucket{le=\"10\"}"), "2");
  EXPECT_EQ(s.at("kvlab:time_to_first_token_seconds_bucket{le=\"+Inf\"}"), "3");
  EXPECT_EQ(s.at("kvlab:time_to_first_token_seconds_count"), "3");
  EXPECT_DOUBLE_EQ(std::stod(s.at("kvlab:time_to_first_token_seconds_sum")), 1000.008);
  // every metric has its HELP and TYPE before its samples
  std::istringstream lines(text);
  std::string line, typed;
  while (std::getline(lines, line)) {
    if (line.rfind("# TYPE ", 0) == 0) typed = line.substr(7, line.find(' ', 7) - 7);
    if (line.empty() || line[0] == '#') continue;
    EXPECT_EQ(line.rfind(typed, 0), 0u) << line << " after TYPE " << typed;
  }
}

TEST(MetricsTest, BucketBoundsMustIncrease) {
  EXPECT_THROW(Histogram({1.0, 0.5}), std::invalid_argument);
  EXPECT_THROW(Histogram({1.0, 1.0}), std::invalid_argument);
}

}  // namespace
}  // namespace kvlab::serve
