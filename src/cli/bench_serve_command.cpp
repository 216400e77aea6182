#include "cli/bench_serve_command.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "spec/spec_error.h"

namespace kvlab {

CLI::App* add_bench_serve_command(CLI::App& bench, BenchServeOptions& o) {
  CLI::App* cmd = bench.add_subcommand(
      "serve",
      "Load an OpenAI-compatible server (kvlab serve, vLLM, llama-server) as `vllm bench serve` "
      "does: streamed completions, then throughput and TTFT / TPOT / ITL / end-to-end latency "
      "(mean, median, p99), and the server's own counters where it exports /metrics");
  serve::LoadOptions& l = o.load;
  cmd->add_option("--url", l.url, "The server's base URL")->capture_default_str();
  cmd->add_option("--model", l.model, "Model name (default: the first of GET /v1/models)");
  cmd->add_option("--api-key", l.api_key, "Bearer key, where the server asks one");
  cmd->add_option("--num-prompts", l.num_prompts, "Requests to send")
      ->check(CLI::Range(int64_t{1}, int64_t{1000000}))
      ->capture_default_str();
  cmd->add_option("--request-rate", o.request_rate,
                  "Requests per second, arriving as a Poisson process (inf: all at once)")
      ->capture_default_str();
  cmd->add_option("--max-concurrency", l.max_concurrency,
                  "Requests in flight at most (0: no limit but 1,024 client threads)")
      ->check(CLI::Range(int64_t{0}, int64_t{1000000}))
      ->capture_default_str();
  cmd->add_option("--input-len", l.input_len, "Prompt tokens of each random prompt")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
      ->capture_default_str();
  cmd->add_option("--output-len", l.output_len,
                  "Tokens to generate for each request (with ignore_eos: exactly these)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
      ->capture_default_str();
  cmd->add_option("--prefix-len", l.prefix_len,
                  "The first tokens of every random prompt, the same for all (a shared system "
                  "prompt: the prefix cache's case)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24))
      ->capture_default_str();
  cmd->add_option("--vocab-size", l.vocab_size,
                  "Random prompts' token ids are drawn below this (256: valid for any model with a "
                  "byte vocabulary or larger)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->capture_default_str();
  cmd->add_option("--dataset", l.dataset,
                  "JSON lines {\"prompt\": text, \"max_tokens\": n} instead of random prompts");
  cmd->add_option("--seed", l.seed, "Seed of the random prompts and arrivals")
      ->capture_default_str();
  cmd->add_option("--timeout", l.timeout_s, "Seconds one request may take")
      ->check(CLI::Range(0.001, 1e6))
      ->capture_default_str();
  cmd->add_flag("!--no-ignore-eos", l.ignore_eos,
                "Let generation stop at the model's end-of-text token (default: ignore_eos, so "
                "every request generates --output-len tokens)");
  cmd->add_option("--format", o.format, "text | json")->capture_default_str();
  return cmd;
}

int run_bench_serve(BenchServeOptions o, std::ostream& out, std::ostream& err) {
  if (o.format != "text" && o.format != "json") throw SpecError("format", "must be text or json");
  if (o.request_rate == "inf") {
    o.load.request_rate = std::numeric_limits<double>::infinity();
  } else {
    errno = 0;
    char* end = nullptr;
    const double rate = std::strtod(o.request_rate.c_str(), &end);
    if (end == o.request_rate.c_str() || *end != '\0' || errno != 0 || !std::isfinite(rate) ||
        rate <= 0) {
      throw SpecError("request-rate", "must be a positive number of requests/s or inf, got \"" +
                                          o.request_rate + "\"");
    }
    o.load.request_rate = rate;
  }
  const serve::LoadReport report = serve::run_load(o.load, err);
  out << (o.format == "json" ? serve::load_report_json(o.load, report)
                             : serve::load_report_text(o.load, report));
  return report.failed == 0 ? 0 : 1;
}

}  // namespace kvlab
