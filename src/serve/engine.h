#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <vector>

#include "infer/generator.h"
#include "nn/transformer.h"
#include "serve/metrics.h"
#include "serve/scheduler.h"
#include "serve/step_engine.h"
#include "spec/dtype.h"

namespace kvlab::serve {

struct EngineOptions {
  int64_t n_pages = 0;        // KV pages of the cache (page_size tokens each)
  int64_t max_model_len = 0;  // 0: the model's context
  int64_t max_num_seqs = 256;
  int64_t max_batch_tokens = 2048;
  bool prefix_caching = true;
  DType cache_dtype = DType::kBf16;
  DType weight_dtype = DType::kF32;  // the decode step's dense layers (see Generator)
  // The cached decode's attention arithmetic, as generate's --attn-precision: "auto" is int8 on
  // q8_0/q4_0 caches (the only SIMD kernels that read them; f32 reads them with the scalar
  // reference) and bf16 where the decoder supports it, else f32
  std::string attn_precision = "auto";
  int threads = 1;
};

// The serving engine: a Scheduler's steps run on a Generator whose cache pages the scheduler's
// pool owns (PagedKvCache::use_external_pages). Each step copies the pages the plan copies, runs
// the decoding sequences as one batched decode step and each prompt chunk as one prefill pass,
// samples every sampling chunk's next token with its request's own generator, and hands them to
// the scheduler. A sequence slot of the Generator is held while a request runs; preemption frees
// it (a recurrent layout's state is rebuilt with the rest on re-admission).
class Engine : public StepEngine {
 public:
  Engine(nn::TransformerModel model, const EngineOptions& options);

  // See Scheduler::submit (RequestRefused) and Scheduler::cancel. timeout_s > 0: the request is
  // cancelled at the first step that starts that long after it arrived (0: no limit).
  void submit(RequestId id, std::vector<int64_t> prompt, RequestLimits limits,
              RequestSampling sampling = {}, double timeout_s = 0) override;
  // reason: what the metrics count it as (kStop: the server found a stop string in its text).
  void cancel(RequestId id, FinishReason reason = FinishReason::kCancelled) override;
  using StepResult = serve::StepResult;
  // One iteration: the tokens it produced (and the requests it ended), in plan order.
  StepResult step() override;

  bool idle() const override { return scheduler_.idle(); }
  // The counters and histograms so far, with the gauges as they stand now.
  EngineMetrics metrics() const override;
  int64_t max_model_len() const override { return scheduler_.config().max_model_len; }
  int64_t vocab_size() const override { return generator_.vocab_size(); }
  const Scheduler& scheduler() const { return scheduler_; }
  const infer::Generator& generator() const { return generator_; }
  int64_t page_size() const { return generator_.cache().page_size(); }

 private:
  int32_t slot_of(RequestId id);
  void drop(RequestId id);
  using Clock = std::chrono::steady_clock;
  struct Timing {
    Clock::time_point arrival, last_token;
    std::optional<Clock::time_point> deadline;
    int64_t prompt_tokens = 0, tokens = 0;
  };
  // a token's latencies, and the request's end where it ended
  void record(RequestId id, std::optional<FinishReason> finished, bool token,
              Clock::time_point now);

  infer::Generator generator_;
  Scheduler scheduler_;
  std::map<RequestId, int32_t> slots_;
  std::map<RequestId, std::pair<infer::SamplingOptions, std::mt19937_64>> sampling_;
  std::vector<float> logits_;
  std::map<RequestId, Timing> timing_;
  std::map<RequestId, FinishReason> cancel_reasons_;
  EngineMetrics metrics_;
};

}  // namespace kvlab::serve
