// The load generator's arithmetic and its SSE reading, without a server.
#include "serve/load_generator.h"

#include <gtest/gtest.h>

namespace kvlab::serve {
namespace {

TEST(LoadGeneratorTest, PercentilesInterpolateAsNumpy) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);  // unsorted on purpose
  const Percentiles p = percentiles(v);
  // numpy.percentile(range(1, 101), [50, 99]) == [50.5, 99.01]; mean 50.5
  EXPECT_DOUBLE_EQ(p.mean, 50.5);
  EXPECT_DOUBLE_EQ(p.median, 50.5);
  EXPECT_NEAR(p.p99, 99.01, 1e-12);
  const Percentiles one = percentiles({7});
  EXPECT_EQ(one.median, 7);
  EXPECT_EQ(one.p99, 7);
  EXPECT_EQ(percentiles({}).mean, 0);
}

TEST(LoadGeneratorTest, ServerSentEventsSplitAnywhere) {
  const std::string stream =
      ": a comment\n\ndata: {\"a\":1}\n\nevent: x\r\ndata: two\r\ndata: lines\r\n\r\ndata: "
      "[DONE]\n\n";
  // fed a byte at a time, the events come out whole and in order
  std::string buffer;
  std::vector<std::string> events;
  for (const char c : stream) {
    buffer += c;
    take_sse_events(buffer, events);
  }
  EXPECT_EQ(events, (std::vector<std::string>{"{\"a\":1}", "two\nlines", "[DONE]"}));
  EXPECT_TRUE(buffer.empty());
}

TEST(LoadGeneratorTest, RefusesBadOptionsBeforeSendingAnything) {
  LoadOptions o;
  o.url = "ftp://example";
  std::ostringstream progress;
  EXPECT_THROW(run_load(o, progress), std::exception);
  o.url = "http://127.0.0.1:1";
  o.num_prompts = 0;
  EXPECT_THROW(run_load(o, progress), std::exception);
  o.num_prompts = 1;
  o.prefix_len = o.input_len + 1;
  EXPECT_THROW(run_load(o, progress), std::exception);
}

}  // namespace
}  // namespace kvlab::serve
