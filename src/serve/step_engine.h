#pragma once

#include <cstdint>
#include <vector>

#include "infer/sampling_options.h"
#include "serve/metrics.h"
#include "serve/scheduler.h"

namespace kvlab::serve {

// A request's sampling, as the OpenAI API states it (temperature below
// infer::kGreedyBelowTemperature: greedy); seed: its own generator, so a seeded request's tokens
// do not depend on what else is in the batch.
struct RequestSampling {
  infer::SamplingOptions sampling;
  uint64_t seed = 0;
};

// One engine iteration's outcome: the tokens it produced (and the requests it ended), in plan
// order.
struct StepResult {
  std::vector<TokenEvent> events;
  std::vector<RequestId> cancelled, preempted;
  int64_t computed_tokens = 0;
};

// What the HTTP server drives (serve/api_server.h): the serving engine as steps, without its
// model. Engine (serve/engine.h) is the one on the decode runtime; this interface keeps libtorch
// out of the server.
class StepEngine {
 public:
  virtual ~StepEngine() = default;
  // See Scheduler::submit (throws RequestRefused); timeout_s > 0: cancelled at the first step
  // that starts that long after it arrived.
  virtual void submit(RequestId id, std::vector<int64_t> prompt, RequestLimits limits,
                      RequestSampling sampling, double timeout_s) = 0;
  // Ends a request at the next step; reason: what the metrics count it as.
  virtual void cancel(RequestId id, FinishReason reason) = 0;
  virtual StepResult step() = 0;
  virtual bool idle() const = 0;
  virtual EngineMetrics metrics() const = 0;
  virtual int64_t max_model_len() const = 0;
  virtual int64_t vocab_size() const = 0;
};

}  // namespace kvlab::serve
