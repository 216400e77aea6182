#include "serve/load_generator.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "spec/spec_error.h"

namespace kvlab::serve {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// "http://host:port/prefix" -> ("http://host:port", "/prefix")
std::pair<std::string, std::string> split_url(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos ||
      (url.rfind("http://", 0) != 0 && url.rfind("https://", 0) != 0)) {
    throw SpecError("url", "\"" + url + "\" is not an http:// or https:// URL");
  }
  const size_t path = url.find('/', scheme + 3);
  if (path == std::string::npos) return {url, ""};
  std::string prefix = url.substr(path);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  return {url.substr(0, path), prefix};
}

httplib::Headers headers_for(const LoadOptions& o) {
  httplib::Headers h;
  if (!o.api_key.empty()) h.emplace("Authorization", "Bearer " + o.api_key);
  return h;
}

struct Prompt {
  json prompt;  // text or token ids
  int64_t max_tokens = 0;
};

std::vector<Prompt> make_prompts(const LoadOptions& o) {
  std::vector<Prompt> prompts;
  if (!o.dataset.empty()) {
    std::ifstream in(o.dataset);
    if (!in) throw SpecError("dataset", "cannot read " + o.dataset);
    std::string line;
    int64_t number = 0;
    std::vector<Prompt> lines;
    while (std::getline(in, line)) {
      ++number;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const std::string where = o.dataset + " line " + std::to_string(number);
      json j;
      try {
        j = json::parse(line);
      } catch (const json::exception& e) {
        throw SpecError("dataset", where + " is not JSON: " + e.what());
      }
      if (!j.is_object() || !j.contains("prompt") || !j["prompt"].is_string()) {
        throw SpecError("dataset", where + ": each line is {\"prompt\": text, \"max_tokens\": n}");
      }
      Prompt p{j["prompt"], o.output_len};
      if (j.contains("max_tokens")) {
        if (!j["max_tokens"].is_number_integer() || j["max_tokens"].get<int64_t>() < 1) {
          throw SpecError("dataset", where + ": max_tokens must be a positive integer");
        }
        p.max_tokens = j["max_tokens"].get<int64_t>();
      }
      lines.push_back(std::move(p));
    }
    if (lines.empty()) throw SpecError("dataset", o.dataset + " holds no prompt");
    for (int64_t i = 0; i < o.num_prompts; ++i) {
      prompts.push_back(lines[static_cast<size_t>(i) % lines.size()]);
    }
    return prompts;
  }
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int64_t> token(0, o.vocab_size - 1);
  std::vector<int64_t> prefix;
  for (int64_t i = 0; i < o.prefix_len; ++i) prefix.push_back(token(rng));
  for (int64_t n = 0; n < o.num_prompts; ++n) {
    std::vector<int64_t> ids = prefix;
    while (static_cast<int64_t>(ids.size()) < o.input_len) ids.push_back(token(rng));
    prompts.push_back({json(ids), o.output_len});
  }
  return prompts;
}

RequestRecord send_one(const LoadOptions& o, const std::string& model, const Prompt& p) {
  const auto [base, prefix] = split_url(o.url);
  httplib::Client client(base);
  const auto timeout = std::chrono::duration<double>(o.timeout_s);
  client.set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(timeout));
  client.set_connection_timeout(std::chrono::seconds(10));
  json body = {
      {"model", model},   {"prompt", p.prompt}, {"max_tokens", p.max_tokens},
      {"temperature", 0}, {"stream", true},     {"stream_options", {{"include_usage", true}}}};
  if (o.ignore_eos) body["ignore_eos"] = true;
  httplib::Request req;
  req.method = "POST";
  req.path = prefix + "/v1/completions";
  req.headers = headers_for(o);
  req.set_header("Content-Type", "application/json");
  req.body = body.dump();

  RequestRecord r;
  std::string buffer, raw;
  std::vector<std::string> events;
  bool done = false;
  std::optional<Clock::time_point> last_chunk;
  const Clock::time_point start = Clock::now();
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (raw.size() < 4096) raw.append(data, std::min<size_t>(n, 4096));
    buffer.append(data, n);
    events.clear();
    take_sse_events(buffer, events);
    const Clock::time_point now = Clock::now();
    for (const std::string& e : events) {
      if (e == "[DONE]") {
        done = true;
        continue;
      }
      const json chunk = json::parse(e, nullptr, false);
      if (chunk.is_discarded()) continue;
      if (chunk.contains("usage") && chunk["usage"].is_object()) {
        r.prompt_tokens = chunk["usage"].value("prompt_tokens", int64_t{0});
        r.output_tokens = chunk["usage"].value("completion_tokens", int64_t{0});
      }
      if (!chunk.contains("choices") || !chunk["choices"].is_array() || chunk["choices"].empty()) {
        continue;
      }
      const json& choice = chunk["choices"][0];
      if (!choice.contains("text") || !choice["text"].is_string() ||
          choice["text"].get<std::string>().empty()) {
        continue;
      }
      if (!last_chunk) {
        r.ttft_s = seconds_between(start, now);
      } else {
        r.itl_s.push_back(seconds_between(*last_chunk, now));
      }
      last_chunk = now;
    }
    return true;
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  const bool sent = client.send(req, res, error);
  r.e2e_s = seconds_between(start, Clock::now());
  if (!sent) {
    r.error = "connection: " + httplib::to_string(error);
  } else if (res.status != 200) {
    r.error = "HTTP " + std::to_string(res.status) + ": " + raw.substr(0, 300);
  } else if (!done) {
    r.error = "the stream ended without data: [DONE]";
  } else {
    r.ok = true;
  }
  return r;
}

std::string get_model(const LoadOptions& o) {
  const auto [base, prefix] = split_url(o.url);
  httplib::Client client(base);
  client.set_connection_timeout(std::chrono::seconds(10));
  const httplib::Result res = client.Get(prefix + "/v1/models", headers_for(o));
  if (!res)
    throw SpecError("url", "cannot reach " + o.url + ": " + httplib::to_string(res.error()));
  if (res->status != 200) {
    throw SpecError("url", "GET /v1/models answered " + std::to_string(res->status) + ": " +
                               res->body.substr(0, 300));
  }
  const json models = json::parse(res->body, nullptr, false);
  if (models.is_discarded() || !models.contains("data") || !models["data"].is_array() ||
      models["data"].empty() || !models["data"][0].contains("id")) {
    throw SpecError("url", "GET /v1/models lists no model: give one with --model");
  }
  return models["data"][0]["id"].get<std::string>();
}

}  // namespace

std::string get_text(const LoadOptions& o, const std::string& path) {
  const auto [base, prefix] = split_url(o.url);
  httplib::Client client(base);
  client.set_connection_timeout(std::chrono::seconds(10));
  const httplib::Result res = client.Get(prefix + path, headers_for(o));
  if (!res) {
    throw SpecError("url", "cannot reach " + o.url + ": " + httplib::to_string(res.error()));
  }
  if (res->status != 200) {
    throw SpecError("url", "GET " + path + " answered " + std::to_string(res->status) + ": " +
                               res->body.substr(0, 300));
  }
  return res->body;
}

namespace {

// The server's /metrics sample values of the names kvlab (or vLLM) exports, summed over labels.
std::map<std::string, double> scrape(const LoadOptions& o) {
  std::map<std::string, double> values;
  const auto [base, prefix] = split_url(o.url);
  httplib::Client client(base);
  client.set_connection_timeout(std::chrono::seconds(2));
  client.set_read_timeout(std::chrono::seconds(5));
  const httplib::Result res = client.Get(prefix + "/metrics", headers_for(o));
  if (!res || res->status != 200) return values;
  std::istringstream lines(res->body);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    std::string name = line.substr(0, space);
    name = name.substr(0, name.find('{'));
    for (const char* ns : {"kvlab:", "vllm:"}) {
      if (name.rfind(ns, 0) == 0) name = name.substr(std::string(ns).size());
    }
    try {
      values[name] += std::stod(line.substr(space + 1));
    } catch (const std::exception&) {
    }
  }
  return values;
}

}  // namespace

void take_sse_events(std::string& buffer, std::vector<std::string>& events) {
  for (;;) {
    size_t end = buffer.find("\n\n");
    size_t skip = 2;
    const size_t crlf = buffer.find("\r\n\r\n");
    if (crlf != std::string::npos && (end == std::string::npos || crlf < end)) {
      end = crlf;
      skip = 4;
    }
    if (end == std::string::npos) return;
    std::istringstream block(buffer.substr(0, end));
    buffer.erase(0, end + skip);
    std::string line, data;
    bool has_data = false;
    while (std::getline(block, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.rfind("data:", 0) != 0) continue;  // comments, event names
      std::string value = line.substr(5);
      if (!value.empty() && value[0] == ' ') value.erase(0, 1);
      data += (has_data ? "\n" : "") + value;
      has_data = true;
    }
    if (has_data) events.push_back(std::move(data));
  }
}

Percentiles percentiles(std::vector<double> v) {
  Percentiles p;
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (const double x : v) sum += x;
  p.mean = sum / static_cast<double>(v.size());
  auto at = [&](double q) {
    const double pos = q * static_cast<double>(v.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
  };
  p.median = at(0.5);
  p.p99 = at(0.99);
  return p;
}

LoadReport run_load(const LoadOptions& o, std::ostream& progress) {
  if (o.num_prompts < 1) throw SpecError("num-prompts", "must be at least 1");
  if (!(o.request_rate > 0)) throw SpecError("request-rate", "must be positive (inf: all at once)");
  if (o.max_concurrency < 0) throw SpecError("max-concurrency", "must be >= 0 (0: no limit)");
  if (o.dataset.empty()) {
    if (o.input_len < 1) throw SpecError("input-len", "must be at least 1");
    if (o.vocab_size < 1) throw SpecError("vocab-size", "must be at least 1");
    if (o.prefix_len < 0 || o.prefix_len > o.input_len) {
      throw SpecError("prefix-len", "must be in [0, input-len]");
    }
  }
  if (o.output_len < 1) throw SpecError("output-len", "must be at least 1");
  split_url(o.url);
  const std::vector<Prompt> prompts = make_prompts(o);
  const std::string model = o.model.empty() ? get_model(o) : o.model;

  // arrival offsets of a Poisson process (all at 0 for an infinite rate)
  std::vector<double> arrival(prompts.size(), 0.0);
  if (std::isfinite(o.request_rate)) {
    std::mt19937_64 rng(o.seed + 1);
    std::exponential_distribution<double> gap(o.request_rate);
    double t = 0;
    for (double& a : arrival) {
      a = t;
      t += gap(rng);
    }
  }
  const int64_t n = static_cast<int64_t>(prompts.size());
  // one thread a request in flight: max_concurrency of them, or (no limit) up to 1,024
  const int64_t workers =
      std::min<int64_t>(n, o.max_concurrency > 0 ? o.max_concurrency : int64_t{1024});
  std::vector<RequestRecord> records(prompts.size());
  std::atomic<int64_t> next{0}, finished{0}, in_flight{0}, max_in_flight{0};
  std::atomic<bool> running{true};
  std::map<std::string, double> peak;
  const std::map<std::string, double> before = scrape(o);
  std::mutex peak_mutex, progress_mutex;
  std::thread poller([&] {
    while (running) {
      const std::map<std::string, double> now = scrape(o);
      {
        std::lock_guard lock(peak_mutex);
        for (const char* gauge :
             {"num_requests_running", "num_requests_waiting", "kv_cache_usage_perc"}) {
          const auto found = now.find(gauge);
          if (found != now.end()) peak[gauge] = std::max(peak[gauge], found->second);
        }
      }
      for (int i = 0; i < 10 && running; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> threads;
  for (int64_t w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      for (int64_t i; (i = next++) < n;) {
        const auto at = start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(arrival[static_cast<size_t>(i)]));
        std::this_thread::sleep_until(at);
        const int64_t open = ++in_flight;
        for (int64_t seen = max_in_flight;
             open > seen && !max_in_flight.compare_exchange_weak(seen, open);) {
        }
        records[static_cast<size_t>(i)] = send_one(o, model, prompts[static_cast<size_t>(i)]);
        --in_flight;
        const int64_t done = ++finished;
        if (done == n || done % std::max<int64_t>(1, n / 10) == 0) {
          std::lock_guard lock(progress_mutex);  // lines whole
          progress << "bench serve: " << done << "/" << n << " requests\n" << std::flush;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  LoadReport report;
  report.duration_s = seconds_between(start, Clock::now());
  running = false;
  poller.join();
  const std::map<std::string, double> after = scrape(o);

  std::vector<double> ttft, tpot, itl, e2e;
  for (const RequestRecord& r : records) {
    if (!r.ok) {
      ++report.failed;
      if (report.errors.size() < 5) report.errors.push_back(r.error);
      continue;
    }
    ++report.completed;
    report.input_tokens += r.prompt_tokens;
    report.output_tokens += r.output_tokens;
    ttft.push_back(r.ttft_s * 1e3);
    e2e.push_back(r.e2e_s * 1e3);
    if (r.output_tokens > 1) {
      tpot.push_back((r.e2e_s - r.ttft_s) * 1e3 / static_cast<double>(r.output_tokens - 1));
    }
    for (const double gap : r.itl_s) itl.push_back(gap * 1e3);
  }
  report.max_in_flight = max_in_flight;
  report.request_throughput = static_cast<double>(report.completed) / report.duration_s;
  report.output_throughput = static_cast<double>(report.output_tokens) / report.duration_s;
  report.total_token_throughput =
      static_cast<double>(report.input_tokens + report.output_tokens) / report.duration_s;
  report.ttft_ms = percentiles(ttft);
  report.tpot_ms = percentiles(tpot);
  report.itl_ms = percentiles(itl);
  report.e2e_ms = percentiles(e2e);
  if (!after.empty()) {
    for (const auto& [name, value] : peak) report.server["peak_" + name] = value;
    for (const char* counter :
         {"num_preemptions_total", "prefix_cache_queries_total", "prefix_cache_hits_total",
          "prompt_tokens_total", "generation_tokens_total"}) {
      const auto a = after.find(counter);
      if (a == after.end()) continue;
      const auto b = before.find(counter);
      report.server[counter] = a->second - (b == before.end() ? 0 : b->second);
    }
  }
  return report;
}

std::string load_report_text(const LoadOptions& o, const LoadReport& r) {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(2);
  auto row = [&](const std::string& name, auto value) {
    out << name << std::string(name.size() < 44 ? 44 - name.size() : 1, ' ') << value << "\n";
  };
  auto section = [&](const std::string& title) {
    const size_t pad = title.size() < 48 ? (50 - title.size()) / 2 : 1;
    out << std::string(pad, '-') << title << std::string(50 - pad - title.size(), '-') << "\n";
  };
  out << "============ Serving Benchmark Result ============\n";
  row("Server:", o.url);
  row("Successful requests:", r.completed);
  row("Failed requests:", r.failed);
  if (o.max_concurrency > 0) row("Maximum request concurrency:", o.max_concurrency);
  row("Request rate (req/s):",
      std::isfinite(o.request_rate) ? std::to_string(o.request_rate) : "inf");
  row("Benchmark duration (s):", r.duration_s);
  row("Total input tokens:", r.input_tokens);
  row("Total generated tokens:", r.output_tokens);
  row("Request throughput (req/s):", r.request_throughput);
  row("Output token throughput (tok/s):", r.output_throughput);
  row("Total token throughput (tok/s):", r.total_token_throughput);
  const std::pair<const char*, const Percentiles*> metrics[] = {
      {"TTFT", &r.ttft_ms}, {"TPOT", &r.tpot_ms}, {"ITL", &r.itl_ms}, {"E2EL", &r.e2e_ms}};
  const char* titles[] = {"Time to First Token", "Time per Output Token (excl. 1st token)",
                          "Inter-token Latency", "End-to-end Latency"};
  for (size_t i = 0; i < 4; ++i) {
    section(titles[i]);
    row(std::string("Mean ") + metrics[i].first + " (ms):", metrics[i].second->mean);
    row(std::string("Median ") + metrics[i].first + " (ms):", metrics[i].second->median);
    row(std::string("P99 ") + metrics[i].first + " (ms):", metrics[i].second->p99);
  }
  if (!r.server.empty()) {
    section("Server (/metrics)");
    for (const auto& [name, value] : r.server) row(name + ":", value);
  }
  out << "==================================================\n";
  for (const std::string& e : r.errors) out << "failed: " << e << "\n";
  return out.str();
}

std::string load_report_json(const LoadOptions& o, const LoadReport& r) {
  auto p = [](const Percentiles& x) {
    return json{{"mean", x.mean}, {"median", x.median}, {"p99", x.p99}};
  };
  json j = {{"url", o.url},
            {"num_prompts", o.num_prompts},
            {"request_rate", std::isfinite(o.request_rate) ? json(o.request_rate) : json("inf")},
            {"max_concurrency", o.max_concurrency},
            {"completed", r.completed},
            {"failed", r.failed},
            {"duration_s", r.duration_s},
            {"total_input_tokens", r.input_tokens},
            {"total_output_tokens", r.output_tokens},
            {"request_throughput", r.request_throughput},
            {"output_throughput", r.output_throughput},
            {"total_token_throughput", r.total_token_throughput},
            {"max_in_flight", r.max_in_flight},
            {"ttft_ms", p(r.ttft_ms)},
            {"tpot_ms", p(r.tpot_ms)},
            {"itl_ms", p(r.itl_ms)},
            {"e2el_ms", p(r.e2e_ms)},
            {"errors", r.errors},
            {"server", r.server}};
  return j.dump(2) + "\n";
}

}  // namespace kvlab::serve
