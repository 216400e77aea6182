#include "serve/kv_budget.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "report/units.h"
#include "spec/memory_budget.h"
#include "spec/spec_error.h"

namespace kvlab::serve {

KvBudget plan_kv_budget(const CacheLayout& layout, int64_t n_layers, int64_t budget_bytes,
                        int64_t page_size, int64_t max_model_len) {
  if (budget_bytes <= 0) throw SpecError("kv-cache-memory", "must be positive");
  if (n_layers <= 0 || page_size <= 0 || max_model_len <= 0) {
    throw SpecError("max-model-len", "layers, page size and length must be positive");
  }
  KvBudget b;
  b.budget_bytes = budget_bytes;
  b.n_layers = n_layers;
  b.page_size = page_size;
  b.max_model_len = max_model_len;
  const Exact per_token = Exact(layout.bytes_per_token()) * Exact(n_layers);
  b.bytes_per_token = per_token.value();
  b.state_bytes_per_sequence = (Exact(layout.state_bytes()) * Exact(n_layers)).value();
  if (b.bytes_per_token > 0) {
    b.page_bytes = (Exact(b.bytes_per_token) * Exact(page_size)).value();
    b.pages = budget_bytes / b.page_bytes;
    b.tokens = (Exact(b.pages) * Exact(page_size)).value();
    b.max_concurrency = static_cast<double>(b.tokens) / static_cast<double>(max_model_len);
    const int64_t pages_per_request = (max_model_len + page_size - 1) / page_size;
    if (b.pages < pages_per_request) {
      throw SpecError("kv-cache-memory",
                      format_bytes(budget_bytes, ByteUnits::kIec) + " holds " +
                          with_commas(b.tokens) + " tokens of this cache (" +
                          with_commas(b.bytes_per_token) + " B per token); one request of " +
                          with_commas(max_model_len) + " tokens needs " +
                          format_bytes(pages_per_request * b.page_bytes, ByteUnits::kIec) +
                          ": raise it or lower --max-model-len");
    }
  } else if (b.state_bytes_per_sequence > 0) {
    b.max_concurrency = std::floor(static_cast<double>(budget_bytes) /
                                   static_cast<double>(b.state_bytes_per_sequence));
    if (b.max_concurrency < 1) {
      throw SpecError("kv-cache-memory", "holds no sequence's recurrent state of " +
                                             with_commas(b.state_bytes_per_sequence) + " B");
    }
  }
  return b;
}

EngineSizing size_engine(const KvBudget& budget, int64_t max_num_seqs) {
  if (budget.bytes_per_token > 0) return {budget.pages, max_num_seqs};
  EngineSizing sizing;
  sizing.max_num_seqs =
      std::min<int64_t>(max_num_seqs, static_cast<int64_t>(budget.max_concurrency));
  sizing.n_pages =
      sizing.max_num_seqs * ((budget.max_model_len + budget.page_size - 1) / budget.page_size);
  return sizing;
}

int64_t parse_memory_budget(std::string_view text, const char* field) {
  const std::string s(text);
  errno = 0;
  char* end = nullptr;
  const double number = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || errno != 0 || !std::isfinite(number) || number <= 0) {
    throw SpecError(field,
                    "expected a size like 2GiB, 512MiB or 1.5GB, or a fraction of memory "
                    "like 0.4; got '" +
                        s + "'");
  }
  const std::string unit(end);
  double bytes = 0;
  if (unit.empty() && number < 1) {  // a fraction of the machine's memory
    const uint64_t total = physical_memory_bytes();
    if (total == 0) throw SpecError(field, "this system does not say how much memory it has");
    bytes = number * static_cast<double>(total);
  } else {
    struct Unit {
      const char* name;
      double scale;
    };
    static constexpr Unit kUnits[] = {{"", 1},
                                      {"B", 1},
                                      {"KiB", 1024.0},
                                      {"MiB", 1048576.0},
                                      {"GiB", 1073741824.0},
                                      {"TiB", 1099511627776.0},
                                      {"kB", 1e3},
                                      {"KB", 1e3},
                                      {"MB", 1e6},
                                      {"GB", 1e9},
                                      {"TB", 1e12}};
    bool known = false;
    for (const Unit& u : kUnits) {
      if (unit == u.name) {
        bytes = number * u.scale;
        known = true;
      }
    }
    if (!known) {
      throw SpecError(field, "unknown unit '" + unit + "' in '" + s +
                                 "' (B, KiB, MiB, GiB, TiB, kB, MB, GB, TB)");
    }
  }
  if (bytes >= 9.2e18) throw SpecError(field, "'" + s + "' is over 2^63 bytes");
  if (bytes < 1) throw SpecError(field, "'" + s + "' is less than a byte");
  return static_cast<int64_t>(bytes);
}

std::vector<std::string> describe_kv_budget(const KvBudget& b) {
  std::vector<std::string> lines;
  const std::string budget = format_bytes(b.budget_bytes, ByteUnits::kIec);
  char concurrency[64];
  std::snprintf(concurrency, sizeof concurrency, "%.2fx", b.max_concurrency);
  if (b.bytes_per_token > 0) {
    lines.push_back("KV cache: " + with_commas(b.bytes_per_token) + " B per token (" +
                    with_commas(b.n_layers) + " layers), pages of " + with_commas(b.page_size) +
                    " tokens (" + with_commas(b.page_bytes) + " B)");
    lines.push_back("KV cache memory " + budget + ": " + with_commas(b.pages) + " pages, " +
                    with_commas(b.tokens) + " tokens");
    lines.push_back("Maximum concurrency for " + with_commas(b.max_model_len) +
                    " tokens per request: " + concurrency);
  } else {
    lines.push_back("Recurrent state: " + with_commas(b.state_bytes_per_sequence) +
                    " B per sequence (" + with_commas(b.n_layers) +
                    " layers), whatever its length");
    lines.push_back("KV cache memory " + budget + ": maximum concurrency " + concurrency);
  }
  return lines;
}

}  // namespace kvlab::serve
