// The serving engine's scheduler and page pool, with no model: a fake model that keeps one token
// id per cache slot stands in. It writes each computed token at its slot through the request's
// pages and derives the next token from the tokens it reads back through them, so a page table
// that loses, mixes or overwrites a row changes the output; the reference is the same function
// of the plain token list.
#include "serve/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <random>
#include <set>

#include "serve/block_pool.h"

namespace kvlab::serve {
namespace {

constexpr int64_t kVocab = 50;
constexpr int64_t kStopToken = 7;

// The next token after `tokens`: a hash of all of them (every token matters).
int64_t next_token(std::span<const int64_t> tokens) {
  uint64_t h = 1469598103934665603ull;
  for (const int64_t t : tokens) h = (h ^ static_cast<uint64_t>(t)) * 1099511628211ull;
  return static_cast<int64_t>((h >> 17) % kVocab);
}

// Greedy generation with the same stop rules the scheduler applies.
std::vector<int64_t> reference_output(std::vector<int64_t> tokens, const RequestLimits& limits) {
  std::vector<int64_t> out;
  for (;;) {
    const int64_t t = next_token(tokens);
    tokens.push_back(t);
    out.push_back(t);
    const auto& stops = limits.stop_token_ids;
    if (std::find(stops.begin(), stops.end(), t) != stops.end()) break;
    if (static_cast<int64_t>(out.size()) >= limits.max_tokens) break;
  }
  return out;
}

class FakeModel {
 public:
  explicit FakeModel(const Scheduler& s)
      : s_(s), slots_(static_cast<size_t>(s.config().n_pages * s.config().page_size), -1) {}

  // Runs a step: the copies, then every chunk's writes, then the sampled tokens.
  std::vector<int64_t> run(const StepPlan& plan) {
    const int64_t P = s_.config().page_size;
    for (const RequestId id : plan.preempted) next_first_.erase(id);
    for (const PageCopy& c : plan.copies) {
      std::copy_n(slots_.begin() + c.from * P, P, slots_.begin() + c.to * P);
    }
    std::vector<int64_t> sampled;
    for (const Chunk& chunk : plan.chunks) {
      const auto& tokens = s_.tokens(chunk.id);
      const auto& pages = s_.pages(chunk.id);
      // a running request's chunks follow one another: no token computed twice, none skipped
      // (its first chunk after admission starts after its cached prefix)
      const auto next = next_first_.find(chunk.id);
      if (next != next_first_.end()) {
        EXPECT_EQ(chunk.first, next->second) << chunk.id;
      }
      next_first_[chunk.id] = chunk.first + chunk.count;
      for (int64_t j = chunk.first; j < chunk.first + chunk.count; ++j) {
        const int32_t page = pages.at(static_cast<size_t>(j / P));
        // a row is only ever written into a page its request holds alone, unpublished
        EXPECT_EQ(s_.pool().refcount(page), 1) << "write into a shared page";
        EXPECT_FALSE(s_.pool().cached(page)) << "write into a cached page";
        slots_[static_cast<size_t>(page * P + j % P)] = tokens[static_cast<size_t>(j)];
      }
      if (!chunk.samples) continue;
      std::vector<int64_t> seen;
      for (int64_t j = 0; j < chunk.first + chunk.count; ++j) {
        seen.push_back(
            slots_[static_cast<size_t>(pages.at(static_cast<size_t>(j / P)) * P + j % P)]);
      }
      sampled.push_back(next_token(seen));
    }
    return sampled;
  }

 private:
  const Scheduler& s_;
  std::vector<int64_t> slots_;
  std::map<RequestId, int64_t> next_first_;
};

void expect_pool_empty(const Scheduler& s) {
  EXPECT_EQ(s.pool().in_use(), 0);
  EXPECT_EQ(s.pool().available(), s.pool().n_pages());
  for (int32_t p = 0; p < s.pool().n_pages(); ++p) EXPECT_EQ(s.pool().refcount(p), 0) << p;
}

TEST(BlockPoolTest, EvictsTheLeastRecentlyReleasedCachedPage) {
  BlockPool pool(3, 2);
  const std::vector<int64_t> a = {1, 2}, b = {3, 4};
  const int32_t pa = *pool.allocate(), pb = *pool.allocate(), pc = *pool.allocate();
  EXPECT_FALSE(pool.allocate().has_value());
  pool.publish(pa, std::nullopt, a);
  pool.publish(pb, std::nullopt, b);
  pool.release(pb);  // released first: evicted first
  pool.release(pa);
  pool.release(pc);  // not cached: free
  EXPECT_EQ(pool.available(), 3);
  EXPECT_EQ(*pool.allocate(), pc);                  // free pages before cached ones
  EXPECT_EQ(*pool.allocate(), pb);                  // then the least recently released
  EXPECT_TRUE(pool.match_prefix(b).pages.empty());  // evicted: gone from the cache
  const BlockPool::Match m = pool.match_prefix(a);
  ASSERT_EQ(m.pages, std::vector<int32_t>{pa});
  EXPECT_EQ(pool.refcount(pa), 1);  // the match holds it
  EXPECT_FALSE(pool.allocate().has_value());
}

TEST(BlockPoolTest, APageMatchesOnlyAfterTheSamePrefix) {
  BlockPool pool(4, 2);
  const std::vector<int64_t> first = {1, 2, 3, 4}, other = {9, 9, 3, 4};
  const int32_t p0 = *pool.allocate(), p1 = *pool.allocate();
  const uint64_t h0 = pool.publish(p0, std::nullopt, std::span(first).subspan(0, 2));
  pool.publish(p1, h0, std::span(first).subspan(2, 2));
  EXPECT_EQ(pool.match_prefix(first).pages, (std::vector<int32_t>{p0, p1}));
  // the same second page after another first page is another page
  EXPECT_TRUE(pool.match_prefix(other).pages.empty());
  // a partial page never matches
  const std::vector<int64_t> partial = {1, 2, 3};
  EXPECT_EQ(pool.match_prefix(partial).pages.size(), 1u);
}

TEST(BlockPoolTest, WithoutPrefixCachingNothingMatches) {
  BlockPool pool(2, 2, false);
  const std::vector<int64_t> t = {1, 2};
  const int32_t p = *pool.allocate();
  pool.publish(p, std::nullopt, t);
  EXPECT_FALSE(pool.cached(p));
  EXPECT_TRUE(pool.match_prefix(t).pages.empty());
  pool.release(p);
  EXPECT_EQ(pool.available(), 2);
}

TEST(SchedulerTest, RefusesWhatCanNeverFitByName) {
  SchedulerConfig c;
  c.n_pages = 4;
  c.page_size = 4;
  c.max_model_len = 32;
  Scheduler s(c);
  auto refused = [&](std::vector<int64_t> prompt, int64_t max_tokens) {
    try {
      s.submit(1, std::move(prompt), RequestLimits{max_tokens, {}});
    } catch (const RequestRefused& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(refused({}, 4).find("empty"), std::string::npos);
  EXPECT_NE(refused({1}, 0).find("max_tokens"), std::string::npos);
  EXPECT_NE(refused(std::vector<int64_t>(30, 1), 3).find("maximum length of 32"),
            std::string::npos);
  EXPECT_NE(refused(std::vector<int64_t>(10, 1), 7).find("need 5 KV pages; the cache holds 4"),
            std::string::npos);
  EXPECT_EQ(refused(std::vector<int64_t>(10, 1), 6), "accepted");  // 16 tokens: 4 pages
  EXPECT_TRUE(s.idle() == false);
}

TEST(SchedulerTest, ALongPromptDelaysDecodingByOneChunkAtMost) {
  SchedulerConfig c;
  c.n_pages = 64;
  c.page_size = 4;
  c.max_model_len = 256;
  c.max_batch_tokens = 16;
  Scheduler s(c);
  FakeModel model(s);
  s.submit(1, {1, 2, 3}, RequestLimits{40, {}});
  std::vector<int64_t> out_short;
  std::map<RequestId, std::vector<int64_t>> out;
  int steps = 0;
  for (; !s.idle(); ++steps) {
    if (steps == 2) s.submit(2, std::vector<int64_t>(150, 5), RequestLimits{3, {}});
    const StepPlan plan = s.schedule();
    EXPECT_LE(plan.tokens(), 16);
    if (s.n_running() == 2) {
      // the short request decodes every step while the long prompt is computed in chunks
      ASSERT_EQ(plan.chunks.front().id, 1u);
      EXPECT_EQ(plan.chunks.front().count, 1);
    }
    for (const TokenEvent& e : s.complete(plan, model.run(plan))) out[e.id].push_back(e.token);
  }
  EXPECT_EQ(out[1], reference_output({1, 2, 3}, RequestLimits{40, {}}));
  EXPECT_EQ(out[2], reference_output(std::vector<int64_t>(150, 5), RequestLimits{3, {}}));
  // 150 prompt tokens at ≤ 15 a step beside the decode
  EXPECT_GE(steps, 150 / 15);
  expect_pool_empty(s);
}

TEST(SchedulerTest, AFullyCachedPromptRecomputesItsLastTokenIntoACopy) {
  SchedulerConfig c;
  c.n_pages = 16;
  c.page_size = 4;
  c.max_model_len = 64;
  Scheduler s(c);
  FakeModel model(s);
  const std::vector<int64_t> prompt = {4, 8, 15, 16, 23, 42, 1, 2};  // two whole pages
  std::map<RequestId, std::vector<int64_t>> out;
  s.submit(1, prompt, RequestLimits{6, {}});
  // the second arrives while the first still runs and holds its pages
  int copies = 0;
  for (int step = 0; !s.idle(); ++step) {
    if (step == 2) s.submit(2, prompt, RequestLimits{6, {}});
    const StepPlan plan = s.schedule();
    for (const PageCopy& copy : plan.copies) {
      EXPECT_EQ(copy.owner, 2u);
      ++copies;
    }
    for (const Chunk& chunk : plan.chunks) {
      if (chunk.id == 2 && chunk.first < 8) {  // only its last prompt token is computed
        EXPECT_EQ(chunk.first, 7);
        EXPECT_EQ(chunk.count, 1);
      }
    }
    for (const TokenEvent& e : s.complete(plan, model.run(plan))) out[e.id].push_back(e.token);
  }
  EXPECT_EQ(copies, 1);
  EXPECT_EQ(out[1], reference_output(prompt, RequestLimits{6, {}}));
  EXPECT_EQ(out[2], out[1]);
  EXPECT_EQ(s.prefix_hit_tokens(), 8);
  expect_pool_empty(s);
}

// Random arrivals, prompt lengths, shared prefixes, stop tokens and cancellations over a pool too
// small for the load: every request answered exactly once (finished, cancelled or refused), every
// finished output the reference's, no page leaked; preemption and prefix hits both happen.
TEST(SchedulerTest, RandomLoadOnATinyPoolAnswersEveryRequestOnce) {
  for (const bool prefix_caching : {true, false}) {
    SCOPED_TRACE(prefix_caching ? "prefix caching" : "no prefix caching");
    SchedulerConfig c;
    c.n_pages = 24;
    c.page_size = 4;
    c.max_model_len = 64;
    c.max_num_seqs = 6;
    c.max_batch_tokens = 24;
    c.prefix_caching = prefix_caching;
    Scheduler s(c);
    FakeModel model(s);
    std::mt19937_64 rng(20261204);
    auto uniform = [&](int64_t lo, int64_t hi) {
      return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
    };
    std::vector<std::vector<int64_t>> prefixes;
    for (int k = 0; k < 3; ++k) {
      std::vector<int64_t> p;
      for (int64_t i = uniform(8, 28); i > 0; --i) p.push_back(uniform(0, kVocab - 1));
      prefixes.push_back(p);
    }
    struct Expected {
      std::vector<int64_t> prompt;
      RequestLimits limits;
    };
    std::map<RequestId, Expected> submitted;
    std::map<RequestId, std::vector<int64_t>> out;
    std::map<RequestId, int> answers;  // finished or cancelled
    std::set<RequestId> refused, cancel_asked;
    RequestId next_id = 1;
    const RequestId n_requests = 80;
    int64_t steps = 0;
    while (next_id <= n_requests || !s.idle()) {
      ASSERT_LT(++steps, 20000) << "no progress";
      for (int64_t k = uniform(0, 2); k > 0 && next_id <= n_requests; --k, ++next_id) {
        std::vector<int64_t> prompt;
        if (uniform(0, 3) > 0) prompt = prefixes[static_cast<size_t>(uniform(0, 2))];
        for (int64_t i = uniform(prompt.empty() ? 1 : 0, 12); i > 0; --i) {
          prompt.push_back(uniform(0, kVocab - 1));
        }
        RequestLimits limits{uniform(1, 45), {kStopToken}};
        try {
          s.submit(next_id, prompt, limits);
          submitted[next_id] = {prompt, limits};
        } catch (const RequestRefused&) {
          refused.insert(next_id);
          EXPECT_GT(static_cast<int64_t>(prompt.size()) + limits.max_tokens, c.max_model_len);
        }
      }
      if (uniform(0, 40) == 0 && !submitted.empty()) {
        const RequestId victim =
            static_cast<RequestId>(uniform(1, static_cast<int64_t>(next_id) - 1));
        s.cancel(victim);  // may be finished already: ignored
        cancel_asked.insert(victim);
      }
      const StepPlan plan = s.schedule();
      EXPECT_LE(plan.tokens(), c.max_batch_tokens);
      EXPECT_LE(s.n_running(), c.max_num_seqs);
      std::set<RequestId> in_step;
      for (const Chunk& chunk : plan.chunks) EXPECT_TRUE(in_step.insert(chunk.id).second);
      for (const RequestId id : plan.cancelled) {
        ++answers[id];
        EXPECT_TRUE(cancel_asked.count(id));
      }
      for (const TokenEvent& e : s.complete(plan, model.run(plan))) {
        out[e.id].push_back(e.token);
        if (e.finished) ++answers[e.id];
      }
    }
    EXPECT_EQ(submitted.size() + refused.size(), n_requests);
    for (const auto& [id, expected] : submitted) {
      SCOPED_TRACE("request " + std::to_string(id));
      EXPECT_EQ(answers[id], 1);
      const std::vector<int64_t> want = reference_output(expected.prompt, expected.limits);
      if (cancel_asked.count(id) && out[id].size() < want.size()) {
        // cancelled: what it produced is the start of what it would have
        EXPECT_TRUE(std::equal(out[id].begin(), out[id].end(), want.begin()));
      } else {
        EXPECT_EQ(out[id], want);
      }
    }
    int64_t cancelled = 0;
    for (const auto& [id, expected] : submitted) {
      cancelled += out[id].size() < reference_output(expected.prompt, expected.limits).size();
    }
    EXPECT_GT(cancelled, 0);
    EXPECT_GT(refused.size(), 0u);
    EXPECT_GT(s.preemptions(), 0);
    std::cout << submitted.size() << " requests in " << steps << " steps: " << refused.size()
              << " refused, " << cancelled << " cancelled, " << s.preemptions() << " preemptions, "
              << s.prefix_hit_tokens() << " of " << s.prefix_queried_tokens()
              << " prompt tokens from the prefix cache\n";
    if (prefix_caching) {
      EXPECT_GT(s.prefix_hit_tokens(), 0);
    } else {
      EXPECT_EQ(s.prefix_hit_tokens(), 0);
    }
    expect_pool_empty(s);
  }
}

}  // namespace
}  // namespace kvlab::serve
