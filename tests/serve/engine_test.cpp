// The serving engine on real models: each request's tokens are those `kvlab generate` produces
// alone (generate_text_tokens), greedy and seeded, while other requests share the batch, a pool
// too small for them all preempts, prompts are computed in chunks and shared prefixes come from
// the prefix cache.
#include "serve/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <thread>

#include "infer/text_generation.h"
#include "nn/nn_test_util.h"
#include "spec/spec_error.h"

namespace kvlab::serve {
namespace {

nn::TransformerModel engine_model(const char* attn, PosScheme pos) {
  torch::manual_seed(44);
  ModelShape shape = testing::small_shape(pos);
  shape.vocab_size = 37;
  shape.max_context = 256;
  return nn::TransformerModel(ModelConfig::make(shape, attn, DType::kF32), torch::kFloat32);
}

struct Submitted {
  std::vector<int64_t> prompt;
  RequestLimits limits;
  RequestSampling sampling;
};

// What generate_text_tokens makes of the request alone, with the engine's cache dtype and
// attention arithmetic.
std::vector<int64_t> alone(const nn::TransformerModel& model, const Submitted& r, DType dtype,
                           const std::string& precision) {
  infer::TextGenerationOptions o;
  o.attn_precision = precision;
  o.max_tokens = r.limits.max_tokens;
  o.sampling = r.sampling.sampling;
  o.seed = r.sampling.seed;
  o.cache_dtype = dtype;
  const infer::TextGenerationResult result = infer::generate_text_tokens(model, r.prompt, o, {});
  return {result.tokens.begin(), result.tokens.end()};
}

void run_load(const char* attn, PosScheme pos, bool prefix_caching, DType dtype = DType::kF32,
              const std::string& precision = "auto") {
  SCOPED_TRACE(std::string(attn) + (prefix_caching ? ", prefix caching, " : ", ") +
               std::string(dtype_name(dtype)) + ", " + precision);
  const nn::TransformerModel model = engine_model(attn, pos);
  EngineOptions o;
  o.n_pages = 6;  // 96 tokens: fewer than the requests below hold at once
  o.max_num_seqs = 5;
  o.max_batch_tokens = 24;
  o.prefix_caching = prefix_caching;
  o.cache_dtype = dtype;
  o.attn_precision = precision;
  Engine engine(model, o);
  std::mt19937_64 rng(7);
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  std::vector<int64_t> shared;  // two whole pages, then each request's own tokens
  for (int i = 0; i < 32; ++i) shared.push_back(uniform(0, 36));
  std::map<RequestId, Submitted> requests;
  for (RequestId id = 1; id <= 10; ++id) {
    Submitted r;
    if (id % 3 != 0) r.prompt = shared;
    // request 5's prompt is the shared pages alone: all cached once another computed them, its
    // last token is recomputed into a copy of the last page
    for (int64_t i = id == 5 ? 0 : uniform(1, 20); i > 0; --i) r.prompt.push_back(uniform(0, 36));
    r.limits.max_tokens = uniform(4, 14);
    if (id % 4 == 0) {  // sampled, with its own seed
      r.sampling.sampling.temperature = 0.9;
      r.sampling.sampling.top_k = 8;
      r.sampling.seed = 1000 + id;
    }
    requests[id] = r;
  }
  std::map<RequestId, std::vector<int64_t>> out;
  int64_t steps = 0, preemptions = 0, running_peak = 0;
  RequestId next = 1;
  while (next <= requests.size() || !engine.idle()) {
    ASSERT_LT(++steps, 2000);
    if (next <= requests.size() && steps % 2 == 1) {  // arrivals while others run
      const Submitted& r = requests[next];
      engine.submit(next, r.prompt, r.limits, r.sampling);
      ++next;
    }
    const Engine::StepResult result = engine.step();
    preemptions += static_cast<int64_t>(result.preempted.size());
    running_peak = std::max(running_peak, engine.metrics().num_requests_running);
    for (const TokenEvent& e : result.events) out[e.id].push_back(e.token);
  }
  for (const auto& [id, r] : requests) {
    EXPECT_EQ(out[id], alone(model, r, dtype, precision)) << "request " << id;
  }
  EXPECT_GT(preemptions, 0);
  if (prefix_caching) {
    EXPECT_GT(engine.scheduler().prefix_hit_tokens(), 0);
  }
  EXPECT_EQ(engine.scheduler().pool().in_use(), 0);
  // the metrics count what happened
  const EngineMetrics m = engine.metrics();
  int64_t tokens = 0, prompt_tokens = 0;
  for (const auto& [id, r] : requests) {
    tokens += static_cast<int64_t>(out[id].size());
    prompt_tokens += static_cast<int64_t>(r.prompt.size());
  }
  EXPECT_EQ(m.generation_tokens, tokens);
  EXPECT_EQ(m.prompt_tokens, prompt_tokens);
  EXPECT_EQ(m.request_success.at("length") +
                (m.request_success.count("stop") ? m.request_success.at("stop") : 0),
            static_cast<int64_t>(requests.size()));
  EXPECT_EQ(m.time_to_first_token_seconds.count(), static_cast<int64_t>(requests.size()));
  EXPECT_EQ(m.inter_token_latency_seconds.count(), tokens - static_cast<int64_t>(requests.size()));
  EXPECT_EQ(m.e2e_request_latency_seconds.count(), static_cast<int64_t>(requests.size()));
  EXPECT_EQ(m.num_preemptions, preemptions);
  EXPECT_EQ(m.num_requests_running, 0);
  EXPECT_EQ(m.num_requests_waiting, 0);
  EXPECT_EQ(m.kv_cache_usage_perc, 0.0);
  EXPECT_GT(running_peak, 1);
  EXPECT_LE(running_peak, o.max_num_seqs);
}

TEST(EngineTest, EachRequestGetsWhatItGetsAloneUnderLoad) {
  run_load("gqa:2", PosScheme::kRope, true);
  run_load("gqa:2", PosScheme::kRope, false);
  run_load("gva:2,dr=4", PosScheme::kRope, true);
  run_load("mla", PosScheme::kRope, true);
  // rounded cache rows: prompts read back what decode will read, in the engine as alone
  run_load("gqa:2", PosScheme::kRope, true, DType::kBf16);
  run_load("gqa:2", PosScheme::kRope, true, DType::kBf16, "f32");
  run_load("gva:2,dr=4", PosScheme::kRope, true, DType::kQ8_0);
}

// The engine's attention arithmetic by default is generate's "auto": int8 on q8_0/q4_0 caches,
// whose only SIMD kernels are int8 (f32 would read them with the scalar reference), bf16 on a
// bf16 cache where the CPU has it; one the cache cannot take is refused naming the flag.
TEST(EngineTest, AttentionArithmeticIsAutoUnlessGiven) {
  const nn::TransformerModel model = engine_model("gqa:2", PosScheme::kRope);
  const auto precision_of = [&](DType cache, const std::string& asked) {
    EngineOptions o;
    o.n_pages = 8;
    o.cache_dtype = cache;
    o.attn_precision = asked;
    const Engine engine(model, o);
    return engine.generator().decode_model().attn_precision();
  };
  EXPECT_EQ(precision_of(DType::kQ8_0, "auto"), AttnPrecision::kInt8);
  EXPECT_EQ(precision_of(DType::kQ4_0, "auto"), AttnPrecision::kInt8);
  const Engine probe(model, EngineOptions{.n_pages = 8});
  const bool bf16 = probe.generator().decode_model().supports_bf16_precision();
  EXPECT_EQ(precision_of(DType::kBf16, "auto"), bf16 ? AttnPrecision::kBf16 : AttnPrecision::kF32);
  EXPECT_EQ(precision_of(DType::kQ8_0, "f32"), AttnPrecision::kF32);
  for (const auto& [cache, asked] :
       {std::pair{DType::kBf16, "int8"}, std::pair{DType::kF32, "bf16"},
        std::pair{DType::kBf16, "f64"}}) {
    try {
      precision_of(cache, asked);
      ADD_FAILURE() << asked << " arithmetic on a " << dtype_name(cache) << " cache was accepted";
    } catch (const SpecError& e) {
      EXPECT_EQ(e.field(), "attn-precision") << e.what();
    }
  }
}

TEST(EngineTest, LinearAttentionServesWithoutPrefixCaching) {
  run_load("linear", PosScheme::kLearned, false);
  const nn::TransformerModel model = engine_model("linear", PosScheme::kLearned);
  EngineOptions o;
  o.n_pages = 9;
  o.cache_dtype = DType::kF32;
  try {
    Engine engine(model, o);
    ADD_FAILURE() << "prefix caching over a recurrent state was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("recurrent"), std::string::npos) << e.what();
  }
}

TEST(EngineTest, ARequestPastItsTimeoutIsCancelledAndFreesItsPages) {
  const nn::TransformerModel model = engine_model("gqa:2", PosScheme::kRope);
  EngineOptions o;
  o.n_pages = 8;
  o.cache_dtype = DType::kF32;
  Engine engine(model, o);
  engine.submit(1, {1, 2, 3}, RequestLimits{50, {}}, {}, /*timeout_s=*/0.05);
  engine.submit(2, {4, 5, 6}, RequestLimits{5, {}});
  std::vector<RequestId> cancelled;
  std::map<RequestId, int64_t> tokens;
  const auto start = std::chrono::steady_clock::now();
  bool slept = false;
  while (!engine.idle()) {
    if (tokens[1] == 2 && !slept) {  // request 1 is running: its time passes before its third token
      std::this_thread::sleep_for(std::chrono::milliseconds(60));
      slept = true;
    }
    const Engine::StepResult r = engine.step();
    cancelled.insert(cancelled.end(), r.cancelled.begin(), r.cancelled.end());
    for (const TokenEvent& e : r.events) ++tokens[e.id];
    ASSERT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  }
  EXPECT_EQ(cancelled, std::vector<RequestId>{1});
  EXPECT_LT(tokens[1], 50);
  EXPECT_EQ(tokens[2], 5);
  EXPECT_EQ(engine.scheduler().pool().in_use(), 0);
  EXPECT_EQ(engine.metrics().request_success.at("cancelled"), 1);
  EXPECT_THROW(engine.submit(3, {1}, RequestLimits{1, {}}, {}, -1), RequestRefused);
}

}  // namespace
}  // namespace kvlab::serve
