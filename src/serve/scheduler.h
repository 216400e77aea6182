#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "serve/block_pool.h"

namespace kvlab::serve {

using RequestId = uint64_t;

struct SchedulerConfig {
  int64_t n_pages = 0;              // KV pages in the pool
  int64_t page_size = 16;           // tokens a page
  int64_t max_model_len = 0;        // prompt + generated tokens of one request, at most
  int64_t max_num_seqs = 256;       // running sequences, at most
  int64_t max_batch_tokens = 2048;  // tokens computed in one step, at most
  bool prefix_caching = true;
};

// What ends a request's generation, as the OpenAI API names it (cancelled: the client went away
// or the request timed out).
enum class FinishReason { kStop, kLength, kCancelled };
const char* finish_reason_name(FinishReason reason);

struct RequestLimits {
  int64_t max_tokens = 16;              // generated tokens, at most (>= 1)
  std::vector<int64_t> stop_token_ids;  // generation ends after any of these (it is returned)
};

// A request that can never run: it is refused when submitted, not queued.
class RequestRefused : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// One sequence's share of a step: its tokens [first, first + count) are computed into its pages;
// samples: the last of them is its last token, so the step's logits there give its next token.
struct Chunk {
  RequestId id = 0;
  int64_t first = 0;
  int64_t count = 0;
  bool samples = false;
};

// A page's rows copied to another before the step's chunks run: a sequence about to write into a
// page it shares (or one published in the prefix cache) writes into its own copy.
struct PageCopy {
  RequestId owner = 0;
  int32_t from = 0, to = 0;
};

struct StepPlan {
  std::vector<PageCopy> copies;
  std::vector<Chunk> chunks;
  // requests whose pages were taken back this step (they wait, at the front, to be recomputed)
  std::vector<RequestId> preempted;
  // requests ended by cancel() since the last step (their pages are free)
  std::vector<RequestId> cancelled;
  int64_t tokens() const;
};

// A token produced for a request, and whether it ended the request.
struct TokenEvent {
  RequestId id = 0;
  int64_t token = 0;
  std::optional<FinishReason> finished;
};

// Continuous batching (iteration-level scheduling) over a BlockPool, as vLLM's scheduler does it,
// with no model in it: schedule() says which tokens of which sequences the next step computes,
// the caller runs the model on them and hands the sampled tokens to complete().
//
// Each step: one token for every running sequence that is decoding, then prompt chunks of the
// running sequences still in their prompt, then admission of waiting requests in arrival order,
// all under max_batch_tokens (a long prompt is computed a chunk a step, so it delays the others by
// at most one chunk) and max_num_seqs. A waiting request first takes its longest cached prefix of
// whole pages from the prefix cache and computes only the rest (all of it cached: its last token
// is recomputed for its logits, into a copy of the page). When pages run out the newest running
// sequence is preempted: its pages are released and it waits at the front with the tokens it has
// produced, to be computed again (recompute); it is never answered twice nor lost. Full pages are
// published to the prefix cache as they are computed.
class Scheduler {
 public:
  explicit Scheduler(const SchedulerConfig& config);

  // Queues a request; throws RequestRefused (naming the limit) for one that can never fit: an
  // empty prompt, max_tokens < 1, prompt + max_tokens over max_model_len or over the pool.
  void submit(RequestId id, std::vector<int64_t> prompt, RequestLimits limits);
  // Ends a request at the next schedule() (its pages freed there, listed in StepPlan::cancelled).
  // An id that is not live is ignored (it may have just finished).
  void cancel(RequestId id);

  StepPlan schedule();
  // The step's sampled tokens, one for each chunk that samples, in the plan's order.
  std::vector<TokenEvent> complete(const StepPlan& plan, std::span<const int64_t> sampled);

  // A live request's tokens (prompt, then generated) and its pages (token j in pages[j / P]).
  const std::vector<int64_t>& tokens(RequestId id) const;
  const std::vector<int32_t>& pages(RequestId id) const;
  int64_t prompt_length(RequestId id) const;

  bool idle() const { return running_.empty() && waiting_.empty() && cancels_.empty(); }
  int64_t n_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t n_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t preemptions() const { return preemptions_; }
  // Prefix-cache counters in tokens, counted once a request is admitted (vLLM's
  // prefix_cache_queries / prefix_cache_hits): its tokens, and those its cached pages held.
  int64_t prefix_queried_tokens() const { return prefix_queried_tokens_; }
  int64_t prefix_hit_tokens() const { return prefix_hit_tokens_; }
  const BlockPool& pool() const { return pool_; }
  const SchedulerConfig& config() const { return config_; }

 private:
  struct Sequence {
    RequestId id = 0;
    std::vector<int64_t> tokens;
    int64_t prompt_length = 0;
    RequestLimits limits;
    int64_t computed = 0;  // tokens whose rows are in its pages
    std::vector<int32_t> pages;
    bool prefix_matched = false;
    int64_t cached_tokens = 0;  // tokens its prefix-cache match found
    // the first `published` pages are published (or were offered); last_hash: the last one's
    std::vector<uint64_t> hashes;
  };
  Sequence& live(RequestId id);
  const Sequence& live(RequestId id) const;
  // Pages for tokens [0, length) of seq, writing from seq.computed (a copy first where that page
  // is shared or cached); false, changing nothing, when the pool cannot supply them.
  bool reserve(Sequence& seq, int64_t length, StepPlan& plan);
  void release_pages(Sequence& seq);
  // The newest running sequence back to the front of the queue, its pages released.
  void preempt_newest(StepPlan& plan, int64_t& budget);
  void take_prefix(Sequence& seq);
  void publish_full_pages(Sequence& seq);
  std::optional<FinishReason> finish_of(const Sequence& seq, int64_t token) const;

  SchedulerConfig config_;
  BlockPool pool_;
  std::map<RequestId, std::unique_ptr<Sequence>> seqs_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // admission order: the newest last
  std::vector<RequestId> cancels_;
  int64_t preemptions_ = 0;
  int64_t prefix_queried_tokens_ = 0, prefix_hit_tokens_ = 0;
};

}  // namespace kvlab::serve
