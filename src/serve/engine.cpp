#include "serve/engine.h"

#include <stdexcept>
#include <string>

#include "kernels/attn_precision.h"
#include "spec/spec_error.h"

namespace kvlab::serve {
namespace {

int64_t model_len(const nn::TransformerModel& model, const EngineOptions& o) {
  if (o.max_model_len > 0) return o.max_model_len;
  const int64_t context = model->config().shape.max_context;
  if (context <= 0) {
    throw SpecError("max-model-len", "the model states no context length: give one");
  }
  return context;
}

SchedulerConfig scheduler_config(const infer::Generator& gen, const EngineOptions& o,
                                 int64_t max_model_len) {
  SchedulerConfig c;
  c.n_pages = o.n_pages;
  c.page_size = gen.cache().page_size();
  c.max_model_len = max_model_len;
  c.max_num_seqs = o.max_num_seqs;
  c.max_batch_tokens = o.max_batch_tokens;
  c.prefix_caching = o.prefix_caching;
  if (o.prefix_caching && gen.cache().layout().state_scalars > 0) {
    throw SpecError("prefix-cache",
                    "linear attention keeps a recurrent state, not rows per token: pages of a "
                    "prefix cannot be shared (use --no-prefix-cache)");
  }
  return c;
}

}  // namespace

Engine::Engine(nn::TransformerModel model, const EngineOptions& options)
    : generator_(model, options.cache_dtype, model_len(model, options), options.max_num_seqs,
                 options.threads, std::nullopt, std::nullopt, options.n_pages,
                 options.weight_dtype),
      scheduler_(scheduler_config(generator_, options, model_len(model, options))) {
  generator_.cache().use_external_pages();
  infer::DecodeModel& decode = generator_.decode_model();
  decode.set_attn_precision(resolve_decode_attn_precision(
      options.attn_precision, decode.supports_bf16_precision(), options.cache_dtype));
  logits_.resize(static_cast<size_t>(options.max_num_seqs * generator_.vocab_size()));
}

void Engine::submit(RequestId id, std::vector<int64_t> prompt, RequestLimits limits,
                    RequestSampling sampling, double timeout_s) {
  if (!(timeout_s >= 0) || timeout_s > 1e9) {
    throw RequestRefused("timeout must be 0 (none) or a positive number of seconds, got " +
                         std::to_string(timeout_s));
  }
  for (const int64_t token : prompt) {
    if (token < 0 || token >= generator_.vocab_size()) {
      throw RequestRefused("prompt token " + std::to_string(token) +
                           " is outside the vocabulary of " +
                           std::to_string(generator_.vocab_size()));
    }
  }
  const int64_t prompt_tokens = static_cast<int64_t>(prompt.size());
  scheduler_.submit(id, std::move(prompt), std::move(limits));
  sampling_.emplace(id, std::make_pair(sampling.sampling, std::mt19937_64(sampling.seed)));
  const Clock::time_point now = Clock::now();
  Timing& t = timing_[id] = Timing{now, {}, {}, prompt_tokens, 0};
  if (timeout_s > 0) {
    t.deadline =
        now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  }
}

void Engine::cancel(RequestId id, FinishReason reason) {
  if (timing_.count(id) == 0) return;  // finished, or never submitted
  cancel_reasons_[id] = reason;
  scheduler_.cancel(id);
}

int32_t Engine::slot_of(RequestId id) {
  const auto found = slots_.find(id);
  if (found != slots_.end()) return found->second;
  const int32_t slot = generator_.add_sequence();
  slots_.emplace(id, slot);
  return slot;
}

void Engine::drop(RequestId id) {
  const auto found = slots_.find(id);
  if (found == slots_.end()) return;
  generator_.free_sequence(found->second);
  slots_.erase(found);
}

Engine::StepResult Engine::step() {
  StepResult result;
  const Clock::time_point start = Clock::now();
  for (const auto& [id, t] : timing_) {
    if (t.deadline && start >= *t.deadline) scheduler_.cancel(id);
  }
  const StepPlan plan = scheduler_.schedule();
  for (const RequestId id : plan.cancelled) {
    drop(id);
    sampling_.erase(id);
    const auto reason = cancel_reasons_.find(id);
    record(id, reason == cancel_reasons_.end() ? FinishReason::kCancelled : reason->second, false,
           Clock::now());
    if (reason != cancel_reasons_.end()) cancel_reasons_.erase(reason);
  }
  for (const RequestId id : plan.preempted) drop(id);  // recomputed from scratch when re-admitted
  PagedKvCache& cache = generator_.cache();
  for (const PageCopy& copy : plan.copies) cache.copy_page(copy.from, copy.to);

  // every chunk's sequence holds its pages, with the tokens before the chunk in them; the chunks'
  // tokens (decode tokens and prompt chunks alike) are the rows of one step
  std::vector<int32_t> row_slots;
  std::vector<int64_t> row_tokens, logit_rows;
  std::vector<size_t> logit_chunks;  // the plan's chunk of each logit row
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const Chunk& chunk = plan.chunks[i];
    const int32_t slot = slot_of(chunk.id);
    cache.set_pages(slot, scheduler_.pages(chunk.id), chunk.first);
    const std::vector<int64_t>& tokens = scheduler_.tokens(chunk.id);
    for (int64_t t = chunk.first; t < chunk.first + chunk.count; ++t) {
      row_slots.push_back(slot);
      row_tokens.push_back(tokens[static_cast<size_t>(t)]);
    }
    if (chunk.samples) {
      logit_rows.push_back(static_cast<int64_t>(row_slots.size()) - 1);
      logit_chunks.push_back(i);
    }
  }
  const int64_t V = generator_.vocab_size();
  if (logits_.size() < logit_rows.size() * static_cast<size_t>(V)) {
    logits_.resize(logit_rows.size() * static_cast<size_t>(V));
  }
  // the logits of each sampling chunk, in plan order
  std::vector<const float*> chunk_logits(plan.chunks.size(), nullptr);
  if (!row_slots.empty()) {
    generator_.step_rows(row_slots.data(), row_tokens.data(),
                         static_cast<int64_t>(row_slots.size()), logit_rows.data(),
                         static_cast<int64_t>(logit_rows.size()), logits_.data());
    for (size_t k = 0; k < logit_chunks.size(); ++k) {
      chunk_logits[logit_chunks[k]] = logits_.data() + static_cast<int64_t>(k) * V;
    }
  }
  std::vector<int64_t> sampled;
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const Chunk& chunk = plan.chunks[i];
    result.computed_tokens += chunk.count;
    if (!chunk.samples) continue;
    auto& [options, rng] = sampling_.at(chunk.id);
    if (options.temperature < infer::kGreedyBelowTemperature) {
      sampled.push_back(infer::greedy_token(chunk_logits[i], V));
    } else {
      const torch::Tensor logits = torch::from_blob(const_cast<float*>(chunk_logits[i]), {V});
      sampled.push_back(infer::sample(logits, options, rng));
    }
  }
  result.events = scheduler_.complete(plan, sampled);
  const Clock::time_point now = Clock::now();
  for (const TokenEvent& e : result.events) {
    record(e.id, e.finished, true, now);
    if (!e.finished) continue;
    drop(e.id);
    sampling_.erase(e.id);
    cancel_reasons_.erase(e.id);  // a cancel that came too late for it
  }
  result.cancelled = plan.cancelled;
  result.preempted = plan.preempted;
  return result;
}

void Engine::record(RequestId id, std::optional<FinishReason> finished, bool token,
                    Clock::time_point now) {
  const auto found = timing_.find(id);
  if (found == timing_.end()) return;
  Timing& t = found->second;
  auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  if (token) {
    if (t.tokens == 0) {
      metrics_.time_to_first_token_seconds.observe(seconds(now - t.arrival));
      metrics_.prompt_tokens += t.prompt_tokens;
    } else {
      metrics_.inter_token_latency_seconds.observe(seconds(now - t.last_token));
    }
    t.last_token = now;
    ++t.tokens;
    ++metrics_.generation_tokens;
  }
  if (finished) {
    ++metrics_.request_success[finish_reason_name(*finished)];
    metrics_.e2e_request_latency_seconds.observe(seconds(now - t.arrival));
    timing_.erase(found);
  }
}

EngineMetrics Engine::metrics() const {
  EngineMetrics m = metrics_;
  m.num_requests_running = scheduler_.n_running();
  m.num_requests_waiting = scheduler_.n_waiting();
  m.kv_cache_usage_perc = static_cast<double>(scheduler_.pool().in_use()) /
                          static_cast<double>(scheduler_.pool().n_pages());
  m.prefix_cache_queries = scheduler_.prefix_queried_tokens();
  m.prefix_cache_hits = scheduler_.prefix_hit_tokens();
  m.num_preemptions = scheduler_.preemptions();
  return m;
}

}  // namespace kvlab::serve
