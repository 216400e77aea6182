#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "spec/cache_layout.h"

namespace kvlab::serve {

// What a KV memory budget holds for one model's cache layout: the serving engine's pool, sized
// before anything is allocated, and the lines its startup log prints (vLLM's "Maximum concurrency
// for L tokens per request"). bytes_per_token is the spec's count over every layer — `kvlab
// cache`'s bytes/token column times the layers — so the two agree to the byte.
struct KvBudget {
  int64_t budget_bytes = 0;
  int64_t n_layers = 0;
  int64_t bytes_per_token = 0;           // every layer's rows of one token (0: a recurrent layout)
  int64_t page_size = 0;                 // tokens a page
  int64_t page_bytes = 0;                // bytes_per_token × page_size
  int64_t pages = 0;                     // whole pages in the budget
  int64_t tokens = 0;                    // pages × page_size
  int64_t state_bytes_per_sequence = 0;  // a recurrent layout's state, every layer
  int64_t max_model_len = 0;
  // Requests of max_model_len tokens the budget holds at once (a recurrent layout: its states).
  double max_concurrency = 0;
};

// Throws SpecError("kv-cache-memory") where the budget cannot hold one request of max_model_len
// tokens.
KvBudget plan_kv_budget(const CacheLayout& layout, int64_t n_layers, int64_t budget_bytes,
                        int64_t page_size, int64_t max_model_len);

// What an engine gets from a budget: its pages; or, for a recurrent layout (no bytes per token),
// as many sequences as its states allow (at most max_num_seqs), each with a page table for
// max_model_len tokens that holds nothing.
struct EngineSizing {
  int64_t n_pages = 0;
  int64_t max_num_seqs = 0;
};
EngineSizing size_engine(const KvBudget& budget, int64_t max_num_seqs);

// "2GiB", "512MiB", "1.5GB", "1073741824" (bytes), or a fraction of this machine's memory
// ("0.4"); throws SpecError(field) naming the problem.
int64_t parse_memory_budget(std::string_view text, const char* field);

// The startup log's lines for a budget: bytes per token, pages, tokens, maximum concurrency.
std::vector<std::string> describe_kv_budget(const KvBudget& budget);

}  // namespace kvlab::serve
