#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace kvlab::serve {

// `kvlab bench serve`: a load generator for an OpenAI-compatible server, as `vllm bench serve`:
// requests arrive as a Poisson process at request_rate (infinite: all at once), at most
// max_concurrency in flight, each streamed (SSE) so the first token's and every later chunk's
// arrival are timed.
struct LoadOptions {
  std::string url = "http://127.0.0.1:8000";
  std::string model;  // "": the first of GET /v1/models
  std::string api_key;
  int64_t num_prompts = 100;
  double request_rate = std::numeric_limits<double>::infinity();  // requests/s
  int64_t max_concurrency = 0;                                    // 0: no limit
  // Random prompts: input_len token ids drawn below vocab_size (sent as a token array, so the
  // length is exact whatever the tokenizer), output_len tokens asked with ignore_eos.
  int64_t input_len = 256, output_len = 64;
  int64_t vocab_size = 256;
  // Prompts shared by every request: the first prefix_len tokens of each prompt are the same
  // (the prefix cache's case), the rest random.
  int64_t prefix_len = 0;
  std::string dataset;  // JSON lines {"prompt": text, "max_tokens": n} (replaces random prompts)
  bool ignore_eos = true;
  uint64_t seed = 0;
  double timeout_s = 600;  // a request's limit
};

struct RequestRecord {
  bool ok = false;
  std::string error;
  int64_t prompt_tokens = 0, output_tokens = 0;
  double ttft_s = 0, e2e_s = 0;
  std::vector<double> itl_s;  // between consecutive chunks with text
};

struct Percentiles {
  double mean = 0, median = 0, p99 = 0;
};

struct LoadReport {
  int64_t completed = 0, failed = 0;
  double duration_s = 0;
  int64_t input_tokens = 0, output_tokens = 0;
  double request_throughput = 0, output_throughput = 0, total_token_throughput = 0;
  Percentiles ttft_ms, tpot_ms, itl_ms, e2e_ms;
  std::vector<std::string> errors;  // the first few failures' messages
  int64_t max_in_flight = 0;        // requests this client had open at once, at most
  // From the server's /metrics where it has kvlab's (or vLLM's) names: the most running
  // sequences seen (polled every 100 ms), and the counters' growth over the run.
  std::map<std::string, double> server;
};

LoadReport run_load(const LoadOptions& options, std::ostream& progress);
// The body of GET url + path (200 only); throws SpecError("url") naming what went wrong.
std::string get_text(const LoadOptions& options, const std::string& path);
std::string load_report_text(const LoadOptions& options, const LoadReport& report);
std::string load_report_json(const LoadOptions& options, const LoadReport& report);

// Percentiles by linear interpolation between closest ranks (numpy's default), of values.
Percentiles percentiles(std::vector<double> values);
// The SSE events of a response body so far: complete "data: ..." payloads are appended to
// events and removed from buffer.
void take_sse_events(std::string& buffer, std::vector<std::string>& events);

}  // namespace kvlab::serve
