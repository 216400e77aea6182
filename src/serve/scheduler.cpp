#include "serve/scheduler.h"

#include <algorithm>
#include <string>

namespace kvlab::serve {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
  }
  return "?";
}

int64_t StepPlan::tokens() const {
  int64_t n = 0;
  for (const Chunk& c : chunks) n += c.count;
  return n;
}

namespace {

int64_t pages_for(int64_t tokens, int64_t page_size) {
  return (tokens + page_size - 1) / page_size;
}

void check_config(const SchedulerConfig& c) {
  auto positive = [](int64_t v, const char* name) {
    if (v <= 0) {
      throw std::invalid_argument(std::string("scheduler: ") + name + " must be positive, got " +
                                  std::to_string(v));
    }
  };
  positive(c.n_pages, "n_pages");
  positive(c.page_size, "page_size");
  positive(c.max_model_len, "max_model_len");
  positive(c.max_num_seqs, "max_num_seqs");
  positive(c.max_batch_tokens, "max_batch_tokens");
}

}  // namespace

Scheduler::Scheduler(const SchedulerConfig& config)
    : config_((check_config(config), config)),
      pool_(config.n_pages, config.page_size, config.prefix_caching) {}

Scheduler::Sequence& Scheduler::live(RequestId id) {
  const auto found = seqs_.find(id);
  if (found == seqs_.end()) {
    throw std::out_of_range("scheduler: no live request " + std::to_string(id));
  }
  return *found->second;
}

const Scheduler::Sequence& Scheduler::live(RequestId id) const {
  return const_cast<Scheduler*>(this)->live(id);
}

const std::vector<int64_t>& Scheduler::tokens(RequestId id) const { return live(id).tokens; }
const std::vector<int32_t>& Scheduler::pages(RequestId id) const { return live(id).pages; }
int64_t Scheduler::prompt_length(RequestId id) const { return live(id).prompt_length; }

void Scheduler::submit(RequestId id, std::vector<int64_t> prompt, RequestLimits limits) {
  const int64_t n = static_cast<int64_t>(prompt.size());
  if (seqs_.count(id) != 0) {
    throw std::invalid_argument("scheduler: request " + std::to_string(id) + " is already live");
  }
  if (n == 0) throw RequestRefused("the prompt is empty");
  if (limits.max_tokens < 1) {
    throw RequestRefused("max_tokens must be at least 1, got " + std::to_string(limits.max_tokens));
  }
  if (limits.max_tokens > config_.max_model_len - n) {
    throw RequestRefused("the prompt (" + std::to_string(n) + " tokens) and max_tokens (" +
                         std::to_string(limits.max_tokens) +
                         ") are over the model's maximum length of " +
                         std::to_string(config_.max_model_len) + " tokens");
  }
  const int64_t pages = pages_for(n + limits.max_tokens, config_.page_size);
  if (pages > config_.n_pages) {
    throw RequestRefused("the prompt (" + std::to_string(n) + " tokens) and max_tokens (" +
                         std::to_string(limits.max_tokens) + ") need " + std::to_string(pages) +
                         " KV pages; the cache holds " + std::to_string(config_.n_pages));
  }
  auto seq = std::make_unique<Sequence>();
  seq->id = id;
  seq->tokens = std::move(prompt);
  seq->prompt_length = n;
  seq->limits = std::move(limits);
  waiting_.push_back(seq.get());
  seqs_.emplace(id, std::move(seq));
}

void Scheduler::cancel(RequestId id) {
  if (seqs_.count(id) != 0 && std::find(cancels_.begin(), cancels_.end(), id) == cancels_.end()) {
    cancels_.push_back(id);
  }
}

void Scheduler::release_pages(Sequence& seq) {
  for (const int32_t page : seq.pages) pool_.release(page);
  seq.pages.clear();
  seq.hashes.clear();
  seq.computed = 0;
  seq.prefix_matched = false;
}

bool Scheduler::reserve(Sequence& seq, int64_t length, StepPlan& plan) {
  const int64_t P = config_.page_size;
  const int64_t have = static_cast<int64_t>(seq.pages.size());
  // the page the first new token goes into, where it is one already held
  const int64_t first_page = seq.computed / P;
  const bool copy = first_page < have && (pool_.refcount(seq.pages[first_page]) > 1 ||
                                          pool_.cached(seq.pages[first_page]));
  const int64_t needed = (copy ? 1 : 0) + std::max<int64_t>(0, pages_for(length, P) - have);
  if (needed > pool_.available()) return false;
  if (copy) {
    const int32_t to = *pool_.allocate();
    const int32_t from = seq.pages[first_page];
    plan.copies.push_back({seq.id, from, to});
    pool_.release(from);
    seq.pages[first_page] = to;
  }
  while (static_cast<int64_t>(seq.pages.size()) < pages_for(length, P)) {
    seq.pages.push_back(*pool_.allocate());
  }
  return true;
}

void Scheduler::preempt_newest(StepPlan& plan, int64_t& budget) {
  Sequence* victim = running_.back();
  running_.pop_back();
  const auto chunk = std::find_if(plan.chunks.begin(), plan.chunks.end(),
                                  [&](const Chunk& c) { return c.id == victim->id; });
  if (chunk != plan.chunks.end()) {
    budget += chunk->count;
    plan.chunks.erase(chunk);
  }
  std::erase_if(plan.copies, [&](const PageCopy& c) { return c.owner == victim->id; });
  release_pages(*victim);
  waiting_.push_front(victim);
  plan.preempted.push_back(victim->id);
  ++preemptions_;
}

void Scheduler::take_prefix(Sequence& seq) {
  seq.prefix_matched = true;
  const int64_t P = config_.page_size;
  const int64_t n = static_cast<int64_t>(seq.tokens.size());
  BlockPool::Match match = pool_.match_prefix(seq.tokens);
  seq.pages = std::move(match.pages);
  seq.hashes = std::move(match.hashes);
  seq.computed = static_cast<int64_t>(seq.pages.size()) * P;
  seq.cached_tokens = seq.computed;
  if (seq.computed == n) {
    // every token cached: the last one is computed again for its logits, into a copy of its page
    // (reserve() sees to that); the cached page stays the one published
    seq.computed = n - 1;
  }
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  for (const RequestId id : cancels_) {
    if (seqs_.count(id) == 0) continue;  // finished since cancel() was called
    Sequence& seq = live(id);
    release_pages(seq);
    std::erase(running_, &seq);
    std::erase(waiting_, &seq);
    plan.cancelled.push_back(id);
    seqs_.erase(id);
  }
  cancels_.clear();

  int64_t budget = config_.max_batch_tokens;
  // decoding sequences first (one token each), then the running prompts' next chunks
  for (const bool decoding : {true, false}) {
    for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
      Sequence* seq = running_[i];
      const int64_t left = static_cast<int64_t>(seq->tokens.size()) - seq->computed;
      if ((left == 1) != decoding) continue;
      const int64_t count = std::min(left, budget);
      bool preempted = false;
      while (!reserve(*seq, seq->computed + count, plan)) {
        preempted = running_.back() == seq;
        preempt_newest(plan, budget);
        if (preempted) break;
      }
      if (preempted) break;
      plan.chunks.push_back({seq->id, seq->computed, count,
                             seq->computed + count == static_cast<int64_t>(seq->tokens.size())});
      budget -= count;
    }
  }
  // admission in arrival order; none in a step that had to preempt
  while (!waiting_.empty() && budget > 0 && plan.preempted.empty() &&
         static_cast<int64_t>(running_.size()) < config_.max_num_seqs) {
    Sequence* seq = waiting_.front();
    if (!seq->prefix_matched) take_prefix(*seq);
    const int64_t count =
        std::min(static_cast<int64_t>(seq->tokens.size()) - seq->computed, budget);
    if (!reserve(*seq, seq->computed + count, plan)) {
      release_pages(*seq);  // a waiting request holds no pages
      break;
    }
    waiting_.pop_front();
    running_.push_back(seq);
    if (pool_.prefix_caching()) {
      prefix_queried_tokens_ += static_cast<int64_t>(seq->tokens.size());
      prefix_hit_tokens_ += seq->cached_tokens;
    }
    plan.chunks.push_back({seq->id, seq->computed, count,
                           seq->computed + count == static_cast<int64_t>(seq->tokens.size())});
    budget -= count;
  }
  return plan;
}

void Scheduler::publish_full_pages(Sequence& seq) {
  const int64_t P = config_.page_size;
  while (static_cast<int64_t>(seq.hashes.size() + 1) * P <= seq.computed) {
    const size_t k = seq.hashes.size();
    const std::optional<uint64_t> parent =
        k == 0 ? std::nullopt : std::optional<uint64_t>(seq.hashes.back());
    const std::span<const int64_t> tokens(seq.tokens.data() + k * static_cast<size_t>(P),
                                          static_cast<size_t>(P));
    seq.hashes.push_back(pool_.publish(seq.pages[k], parent, tokens));
  }
}

std::optional<FinishReason> Scheduler::finish_of(const Sequence& seq, int64_t token) const {
  const auto& stops = seq.limits.stop_token_ids;
  if (std::find(stops.begin(), stops.end(), token) != stops.end()) return FinishReason::kStop;
  const int64_t generated = static_cast<int64_t>(seq.tokens.size()) - seq.prompt_length;
  if (generated >= seq.limits.max_tokens ||
      static_cast<int64_t>(seq.tokens.size()) >= config_.max_model_len) {
    return FinishReason::kLength;
  }
  return std::nullopt;
}

std::vector<TokenEvent> Scheduler::complete(const StepPlan& plan,
                                            std::span<const int64_t> sampled) {
  const auto samples = std::count_if(plan.chunks.begin(), plan.chunks.end(),
                                     [](const Chunk& c) { return c.samples; });
  if (static_cast<size_t>(samples) != sampled.size()) {
    throw std::invalid_argument("scheduler: " + std::to_string(sampled.size()) +
                                " sampled tokens for a step with " + std::to_string(samples) +
                                " sampling chunks");
  }
  std::vector<TokenEvent> events;
  size_t next = 0;
  for (const Chunk& chunk : plan.chunks) {
    Sequence& seq = live(chunk.id);
    seq.computed = chunk.first + chunk.count;
    publish_full_pages(seq);
    if (!chunk.samples) continue;
    const int64_t token = sampled[next++];
    seq.tokens.push_back(token);
    TokenEvent event{seq.id, token, finish_of(seq, token)};
    if (event.finished) {
      release_pages(seq);
      std::erase(running_, &seq);
      seqs_.erase(seq.id);
    }
    events.push_back(event);
  }
  return events;
}

}  // namespace kvlab::serve
