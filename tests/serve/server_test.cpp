// `kvlab serve` as its users meet it: the built program, started on a small trained byte-level
// model, driven over loopback by cpp-httplib, raw sockets, curl, the official OpenAI client and a
// Prometheus parser (npm oracles), `kvlab bench serve`, and signals. Every greedy text is checked
// against `kvlab generate`'s for the same prompt.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "harness/background.h"
#include "harness/process.h"
#include "serve/load_generator.h"

namespace {

using kvlab::test::BackgroundProcess;
using kvlab::test::Invocation;
using kvlab::test::ProcessResult;
using nlohmann::json;

const std::string& work_dir() {
  static const std::string dir = "/tmp/kvlab_server_test_" + std::to_string(getpid());
  return dir;
}

ProcessResult kvlab(const std::vector<std::string>& args, const std::string& binary = KVLAB_BIN) {
  Invocation run;
  run.args = args;
  run.timeout_s = 300;
  return kvlab::test::run_exec(binary, run);
}

// The program the servers run: kvlab, or (KVLAB_SERVER_BIN) another build of it — ctest's
// ServerTest.asan runs the bad-request and hostile-client tests against kvlab-asan.
std::string server_binary() {
  const char* other = std::getenv("KVLAB_SERVER_BIN");
  return other != nullptr && *other != '\0' ? other : KVLAB_BIN;
}

// A server of the test model; port from its "listening on" line.
struct Server {
  std::unique_ptr<BackgroundProcess> process;
  int port = 0;
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }
};

Server start_server(const std::string& name, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"serve",
                                   "--checkpoint",
                                   work_dir() + "/run",
                                   "--port",
                                   "0",
                                   "--kv-cache-memory",
                                   "16MiB",
                                   "--max-model-len",
                                   "256",
                                   "--threads",
                                   "1",
                                   "--served-model-name",
                                   "tiny"};
  args.insert(args.end(), extra.begin(), extra.end());
  Server s;
  s.process = std::make_unique<BackgroundProcess>(
      server_binary(), args, work_dir() + "/" + name + ".out", work_dir() + "/" + name + ".err");
  const std::optional<std::string> line = s.process->wait_for_stderr("listening on http://", 120);
  if (!line) throw std::runtime_error("kvlab serve did not start: " + s.process->err());
  s.port = std::stoi(line->substr(line->rfind(':') + 1));
  return s;
}

// The test model and the texts `kvlab generate` makes of a few prompts, and the servers.
struct Fixture {
  std::map<std::string, std::string> expected;  // prompt -> greedy text of 40 tokens
  Server server, keyed;
};
Fixture* fixture = nullptr;

class ServerEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    std::filesystem::remove_all(work_dir());
    std::filesystem::create_directories(work_dir());
    {
      std::string corpus;
      for (int i = 0; i < 200; ++i) {
        corpus +=
            "in the beginning god created the heaven and the earth. and the earth was "
            "without form, and void; and darkness was upon the face of the deep. ";
      }
      kvlab::test::write_file(work_dir() + "/corpus.txt", corpus);
    }
    const ProcessResult train = kvlab({"train",
                                       "--task",
                                       "text",
                                       "--data",
                                       work_dir() + "/corpus.txt",
                                       "--seq-len",
                                       "64",
                                       "--layers",
                                       "2",
                                       "--d-model",
                                       "64",
                                       "--heads",
                                       "4",
                                       "--attn",
                                       "gqa:2",
                                       "--mlp-kind",
                                       "swiglu",
                                       "--mlp",
                                       "128",
                                       "--norm",
                                       "rmsnorm",
                                       "--bias",
                                       "none",
                                       "--pos",
                                       "rope",
                                       "--steps",
                                       "120",
                                       "--batch",
                                       "16",
                                       "--threads",
                                       "2",
                                       "--no-progress",
                                       "--out",
                                       work_dir() + "/run"});
    ASSERT_EQ(train.exit_code, 0) << train.err;
    fixture = new Fixture;
    for (const std::string prompt : {"in the beginning", "and darkness was", "the earth"}) {
      const ProcessResult gen = kvlab(
          {"generate", "--checkpoint", work_dir() + "/run", "--prompt", prompt, "--max-tokens",
           "40", "--cache-dtype", "bf16", "--attn-precision", "auto", "--threads", "1"},
          server_binary());  // the servers' build and attention arithmetic: its rounding
      ASSERT_EQ(gen.exit_code, 0) << gen.err;
      ASSERT_EQ(gen.out.size(), 41u) << gen.out;  // 40 bytes and a newline
      fixture->expected[prompt] = gen.out.substr(0, 40);
    }
    fixture->server = start_server("main", {"--read-timeout", "1"});
    fixture->keyed = start_server("keyed", {"--api-key", "sesame"});
  }
  void TearDown() override {
    if (fixture == nullptr) return;
    for (Server* s : {&fixture->server, &fixture->keyed}) {
      if (!s->process) continue;
      s->process->signal(SIGTERM);
      const std::optional<int> status = s->process->wait(30);
      EXPECT_EQ(status, std::optional<int>(0)) << s->process->err();
    }
    delete fixture;
    std::filesystem::remove_all(work_dir());
  }
};
const auto* const environment = ::testing::AddGlobalTestEnvironment(new ServerEnvironment);

httplib::Client client() {
  httplib::Client c("127.0.0.1", fixture->server.port);
  c.set_read_timeout(std::chrono::seconds(60));
  return c;
}

json post(const std::string& path, const json& body, int expected_status = 200) {
  httplib::Client c = client();
  const httplib::Result r = c.Post(path, body.dump(), "application/json");
  if (!r) throw std::runtime_error("POST " + path + ": " + httplib::to_string(r.error()));
  EXPECT_EQ(r->status, expected_status) << r->body;
  return json::parse(r->body);
}

// The server's /metrics sample values (summed over labels), by name.
std::map<std::string, double> metrics(int port) {
  httplib::Client c("127.0.0.1", port);
  const httplib::Result r = c.Get("/metrics");
  std::map<std::string, double> values;
  if (!r) return values;
  std::istringstream lines(r->body);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    const std::string name = line.substr(0, space);
    const double value = std::stod(line.substr(space + 1));
    values[name.substr(0, name.find('{'))] += value;  // summed over labels
    if (name.find('{') != std::string::npos) values[name] = value;
  }
  return values;
}

// Waits (bounded) until the server holds no request and no page.
bool server_drained(int port) {
  for (int i = 0; i < 400; ++i) {
    std::map<std::string, double> m = metrics(port);
    if (m["kvlab:num_requests_running"] == 0 && m["kvlab:num_requests_waiting"] == 0 &&
        m["kvlab:kv_cache_usage_perc"] == 0) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return false;
}

// A raw TCP connection to the server, for what clients that behave do not do.
class RawSocket {
 public:
  explicit RawSocket(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    timeval tv{10, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~RawSocket() { close(); }
  bool connected() const { return connected_; }
  void send(const std::string& bytes) { (void)!::write(fd_, bytes.data(), bytes.size()); }
  // Reads until the peer closes, `until` appears, or the 10 s receive timeout.
  std::string read(const std::string& until = "") {
    std::string got;
    char buf[4096];
    for (;;) {
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
      if (!until.empty() && got.find(until) != std::string::npos) break;
    }
    return got;
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

std::string post_text(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

TEST(ServerTest, GreedyTextEqualsGenerateWhateverElseIsInTheBatch) {
  // every prompt three times at once, streamed and not, beside sampled requests
  std::vector<std::thread> threads;
  std::vector<std::string> failures;
  std::mutex mutex;
  for (int round = 0; round < 3; ++round) {
    for (const auto& [prompt, want] : fixture->expected) {
      threads.emplace_back([&, prompt = prompt, want = want, round] {
        httplib::Client c = client();
        const json body = {
            {"prompt", prompt}, {"max_tokens", 40}, {"temperature", 0}, {"stream", round == 1}};
        const httplib::Result r = c.Post("/v1/completions", body.dump(), "application/json");
        std::string text;
        if (r && round == 1) {
          std::string buffer = r->body;
          std::vector<std::string> events;
          kvlab::serve::take_sse_events(buffer, events);
          for (const std::string& e : events) {
            if (e == "[DONE]") continue;
            const json chunk = json::parse(e);
            if (!chunk["choices"].empty()) text += chunk["choices"][0]["text"].get<std::string>();
          }
        } else if (r) {
          text = json::parse(r->body)["choices"][0]["text"];
        }
        std::lock_guard lock(mutex);
        if (!r || r->status != 200 || text != want) {
          failures.push_back(prompt + " (round " + std::to_string(round) + "): got \"" + text +
                             "\", want \"" + want + "\"");
        }
      });
    }
    threads.emplace_back([&] {
      post("/v1/completions",
           {{"prompt", "and"}, {"max_tokens", 30}, {"temperature", 1.0}, {"top_k", 5}});
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_TRUE(failures.empty()) << ::testing::PrintToString(failures);
  EXPECT_TRUE(server_drained(fixture->server.port));
}

TEST(ServerTest, StopStringsEndTheTextBeforeThem) {
  const std::string& want = fixture->expected.at("in the beginning");
  // a stop string from the middle of the greedy text, and one that never appears
  const std::string stop = want.substr(12, 3);
  const json r = post("/v1/completions", {{"prompt", "in the beginning"},
                                          {"max_tokens", 40},
                                          {"temperature", 0},
                                          {"stop", {"#never#", stop}}});
  EXPECT_EQ(r["choices"][0]["text"], want.substr(0, want.find(stop)));
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  // a stop token id (vLLM's stop_token_ids): the byte of the text's 5th character
  const json by_id =
      post("/v1/completions", {{"prompt", "in the beginning"},
                               {"max_tokens", 40},
                               {"temperature", 0},
                               {"stop_token_ids", {static_cast<unsigned char>(want[4])}}});
  EXPECT_EQ(by_id["choices"][0]["text"], want.substr(0, want.find(want[4]) + 1));
  EXPECT_EQ(by_id["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(server_drained(fixture->server.port));
}

TEST(ServerTest, BadRequestsGetOpenAiErrorsAndTheirStatus) {
  struct Case {
    std::string method, path, body;
    int status;
    std::string param;  // "" : null
  };
  const std::string ok = R"("prompt": "and", "max_tokens": 4)";
  const std::vector<Case> cases = {
      {"POST", "/v1/completions", "{" + ok + ", \"n\": 2}", 400, "n"},
      {"POST", "/v1/completions", "{" + ok + ", \"temperature\": -0.5}", 400, "temperature"},
      {"POST", "/v1/completions", "{" + ok + ", \"temperature\": \"warm\"}", 400, "temperature"},
      {"POST", "/v1/completions", "{" + ok + ", \"top_p\": 1.5}", 400, "top_p"},
      {"POST", "/v1/completions", "{" + ok + ", \"top_k\": 2.5}", 400, "top_k"},
      {"POST", "/v1/completions", "{" + ok + ", \"seed\": 1e30}", 400, "seed"},
      {"POST", "/v1/completions", "{" + ok + ", \"stop\": [\"\"]}", 400, "stop"},
      {"POST", "/v1/completions", "{" + ok + ", \"logprobs\": 3}", 400, "logprobs"},
      {"POST", "/v1/completions", "{" + ok + ", \"frobnicate\": true}", 400, "frobnicate"},
      {"POST", "/v1/completions", "{" + ok + ", \"stream_options\": {\"include_usage\": true}}",
       400, "stream_options"},
      {"POST", "/v1/completions", R"({"prompt": "and", "max_tokens": 0})", 400, "max_tokens"},
      {"POST", "/v1/completions", R"({"prompt": "and", "max_tokens": 300})", 400, "max_tokens"},
      {"POST", "/v1/completions", R"({"prompt": [1, 999], "max_tokens": 2})", 400, "prompt"},
      {"POST", "/v1/completions", R"({"prompt": ["a", "b"]})", 400, "prompt"},
      {"POST", "/v1/completions", R"({"prompt": ""})", 400, "prompt"},
      {"POST", "/v1/completions", R"({"max_tokens": 3})", 400, "prompt"},
      {"POST", "/v1/completions", std::string(300, 'a'), 400, ""},
      {"POST", "/v1/completions", "{\"prompt\": \"a\", ", 400, ""},
      {"POST", "/v1/completions", "[1, 2]", 400, ""},
      {"POST", "/v1/completions", "{\"prompt\": \"\xff\xfe\"}", 400, ""},
      {"POST", "/v1/completions", std::string(200000, '[') + std::string(200000, ']'), 400, ""},
      {"POST", "/v1/chat/completions", R"({"messages": []})", 400, "messages"},
      {"POST", "/v1/chat/completions", R"({"messages": [{"role": "robot", "content": "x"}]})", 400,
       "messages[0].role"},
      {"POST", "/v1/chat/completions", R"({"messages": [{"role": "user"}]})", 400,
       "messages[0].content"},
      {"POST", "/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", 400,
       "messages[0].content[0]"},
      {"POST", "/v1/completions", "{" + ok + ", \"model\": \"gpt-9\"}", 404, "model"},
      {"GET", "/v1/nothing", "", 404, ""},
      {"GET", "/index.html", "", 404, ""},
      {"GET", "/v1/completions", "", 405, ""},
      {"DELETE", "/metrics", "", 405, ""},
      {"POST", "/", "{}", 405, ""},
      {"PUT", "/v1/chat/completions", "{}", 405, ""},
      {"POST", "/v1/completions", std::string(5 << 20, ' '), 413, ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.method + " " + c.path + " " + c.body.substr(0, 80));
    httplib::Client http = client();
    httplib::Result r = c.method == "GET"      ? http.Get(c.path)
                        : c.method == "DELETE" ? http.Delete(c.path)
                        : c.method == "PUT"    ? http.Put(c.path, c.body, "application/json")
                                               : http.Post(c.path, c.body, "application/json");
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    EXPECT_EQ(r->status, c.status) << r->body;
    const json e = json::parse(r->body, nullptr, false);
    ASSERT_TRUE(e.contains("error")) << r->body;
    EXPECT_TRUE(e["error"]["message"].is_string() && !e["error"]["message"].empty());
    EXPECT_TRUE(e["error"]["type"].is_string());
    EXPECT_EQ(e["error"]["param"], c.param.empty() ? json() : json(c.param)) << r->body;
    if (c.status == 405) {
      EXPECT_FALSE(r->get_header_value("Allow").empty());
    }
  }
  // the keyed server: 401 without the key or with another, served with it
  httplib::Client keyed("127.0.0.1", fixture->keyed.port);
  const std::string body = "{" + ok + "}";
  EXPECT_EQ(keyed.Post("/v1/completions", body, "application/json")->status, 401);
  EXPECT_EQ(
      keyed.Post("/v1/completions", {{"Authorization", "Bearer nope"}}, body, "application/json")
          ->status,
      401);
  EXPECT_EQ(
      keyed.Post("/v1/completions", {{"Authorization", "Bearer sesame"}}, body, "application/json")
          ->status,
      200);
  EXPECT_EQ(keyed.Get("/health")->status, 200);  // health and metrics need no key
  EXPECT_TRUE(server_drained(fixture->server.port));
}

TEST(ServerTest, HostileClientsLeaveTheServerServingAndLeakNothing) {
  const int port = fixture->server.port;
  const std::map<std::string, double> before = metrics(port);
  // a request held open past the read timeout (1 s here): dropped, while others are served
  RawSocket slow(port);
  ASSERT_TRUE(slow.connected());
  slow.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pro");
  const json served =
      post("/v1/completions", {{"prompt", "the earth"}, {"max_tokens", 40}, {"temperature", 0}});
  EXPECT_EQ(served["choices"][0]["text"], fixture->expected.at("the earth"));
  const auto start = std::chrono::steady_clock::now();
  const std::string refused = slow.read("\r\n\r\n");  // answered 400 after the read timeout
  EXPECT_EQ(refused.rfind("HTTP/1.1 400", 0), 0u) << refused;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(8));
  // a malformed request line, and a header line longer than any
  for (const std::string& garbage : {std::string("\x16\x03\x01 hello\r\n\r\n"),
                                     std::string("GET / HTTP/1.1\r\n") + std::string(20000, 'x')}) {
    RawSocket s(port);
    s.send(garbage);
    const std::string answer = s.read("\r\n\r\n");
    EXPECT_EQ(answer.rfind("HTTP/1.1 4", 0), 0u) << answer.substr(0, 100);
  }
  // streams dropped mid-way, 24 at once (their cancels come together)
  std::vector<std::thread> dropped;
  for (int i = 0; i < 24; ++i) {
    dropped.emplace_back([port, i] {
      RawSocket s(port);
      s.send(post_text("/v1/completions", json{{"prompt", "in the beginning"},
                                               {"max_tokens", 200},
                                               {"temperature", 0.5},
                                               {"seed", i},
                                               {"stream", true}}
                                              .dump()));
      s.read("data: ");  // the first token, then gone
    });
  }
  for (std::thread& t : dropped) t.join();
  // a non-streamed request whose client goes away before its answer: it runs to its end
  {
    RawSocket s(port);
    s.send(post_text("/v1/completions", R"({"prompt": "and", "max_tokens": 100})"));
  }
  // every request ends, one way or another: 24 streams, the one served, the one left behind
  double ended = 0;
  for (int i = 0; i < 400 && ended < 24 + 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
    ended =
        metrics(port).at("kvlab:request_success_total") - before.at("kvlab:request_success_total");
  }
  EXPECT_EQ(ended, 24 + 2);
  // the dropped streams were cancelled (their sequences freed), not run to their end
  const std::string cancelled = "kvlab:request_success_total{finished_reason=\"cancelled\"}";
  EXPECT_EQ(metrics(port)[cancelled] - before.at(cancelled), 24);
  ASSERT_TRUE(server_drained(port)) << "requests or pages left after the clients went away";
  // and the server still answers right
  const json again =
      post("/v1/completions", {{"prompt", "the earth"}, {"max_tokens", 40}, {"temperature", 0}});
  EXPECT_EQ(again["choices"][0]["text"], fixture->expected.at("the earth"));
}

TEST(ServerTest, RawServerSentEventsThroughCurl) {
  Invocation curl;
  curl.args = {"-sN",
               "--max-time",
               "60",
               fixture->server.url() + "/v1/completions",
               "-H",
               "Content-Type: application/json",
               "-d",
               json{{"prompt", "and darkness was"},
                    {"max_tokens", 40},
                    {"temperature", 0},
                    {"stream", true},
                    {"stream_options", {{"include_usage", true}}}}
                   .dump()};
  const ProcessResult r = kvlab::test::run_exec("/usr/bin/curl", curl);
  if (r.exit_code == 127) GTEST_SKIP() << "curl is not installed: " << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // every event is "data: <json>" and a blank line; the last is [DONE]
  std::string text;
  std::istringstream lines(r.out);
  std::vector<std::string> events;
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    ASSERT_EQ(line.rfind("data: ", 0), 0u) << line;
    events.push_back(line.substr(6));
  }
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  const json usage = json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 40);
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    const json chunk = json::parse(events[i]);
    EXPECT_EQ(chunk["object"], "text_completion");
    text += chunk["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, fixture->expected.at("and darkness was"));
  EXPECT_EQ(json::parse(events[events.size() - 3])["choices"][0]["finish_reason"], "length");
}

TEST(ServerTest, OfficialOpenAiClientAndPrometheusParser) {
  const char* oracles = std::getenv("KVLAB_ORACLES");
  if (oracles == nullptr) GTEST_SKIP() << "KVLAB_ORACLES is not set (run through ctest)";
  const std::string unavailable = std::string(oracles) + "/UNAVAILABLE";
  if (std::filesystem::exists(unavailable)) {
    GTEST_SKIP() << "npm oracles unavailable: " << kvlab::test::slurp(unavailable);
  }
  json config = {{"url", fixture->server.url()},
                 {"model", "tiny"},
                 {"key_url", fixture->keyed.url()},
                 {"api_key", "sesame"},
                 {"cases", json::array()}};
  for (const auto& [prompt, want] : fixture->expected) {
    config["cases"].push_back(
        {{"prompt", prompt}, {"max_tokens", 40}, {"expected", want}, {"stop", want.substr(20, 2)}});
  }
  const std::string path = work_dir() + "/openai_client.json";
  kvlab::test::write_file(path, config.dump());
  Invocation node;
  node.args = {std::string(KVLAB_ORACLE_SCRIPTS) + "/openai_client.mjs", oracles, path};
  const ProcessResult r = kvlab::test::run_exec("/usr/bin/node", node);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("checks passed"), std::string::npos) << r.out;
}

TEST(ServerTest, ThePageInARealBrowser) {
  const char* oracles = std::getenv("KVLAB_ORACLES");
  if (oracles == nullptr) GTEST_SKIP() << "KVLAB_ORACLES is not set (run through ctest)";
  const std::string unavailable = std::string(oracles) + "/UNAVAILABLE";
  if (std::filesystem::exists(unavailable)) {
    GTEST_SKIP() << "npm oracles unavailable: " << kvlab::test::slurp(unavailable);
  }
  const std::string chromium = "/usr/bin/chromium";
  if (!std::filesystem::exists(chromium)) GTEST_SKIP() << "Debian's chromium is not installed";
  const std::string screenshot = std::string(KVLAB_BUILD_DIR) + "/serve-page.png";
  const json config = {{"url", fixture->server.url()},
                       {"chromium", chromium},
                       {"screenshot", screenshot},
                       {"prompt", "in the beginning"},
                       {"max_tokens", 40},
                       {"expected", fixture->expected.at("in the beginning")}};
  const std::string path = work_dir() + "/page_check.json";
  kvlab::test::write_file(path, config.dump());
  Invocation node;
  node.args = {std::string(KVLAB_ORACLE_SCRIPTS) + "/page_check.mjs", oracles, path};
  node.timeout_s = 180;
  const ProcessResult r = kvlab::test::run_exec("/usr/bin/node", node);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(std::filesystem::file_size(screenshot) > 1000) << screenshot;
  std::cout << r.out;
}

TEST(ServerTest, BenchServeLoadsTheServer) {
  const ProcessResult r = kvlab({"bench", "serve", "--url", fixture->server.url(), "--num-prompts",
                                 "12", "--max-concurrency", "4", "--input-len", "20",
                                 "--output-len", "8", "--prefix-len", "16", "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json report = json::parse(r.out);
  EXPECT_EQ(report["completed"], 12);
  EXPECT_EQ(report["failed"], 0);
  EXPECT_EQ(report["total_input_tokens"], 12 * 20);
  EXPECT_EQ(report["total_output_tokens"], 12 * 8);
  EXPECT_LE(report["max_in_flight"].get<int>(), 4);
  EXPECT_GT(report["ttft_ms"]["median"].get<double>(), 0);
  EXPECT_LE(report["ttft_ms"]["median"].get<double>(), report["e2el_ms"]["median"].get<double>());
  EXPECT_EQ(report["server"]["generation_tokens_total"], 12 * 8);
  // the shared 16-token prefix (one page) came from the prefix cache for most of them
  EXPECT_GT(report["server"]["prefix_cache_hits_total"].get<double>(), 0);
  // a server that is not there: a clear failure
  const ProcessResult down =
      kvlab({"bench", "serve", "--url", "http://127.0.0.1:1", "--num-prompts", "2"});
  EXPECT_NE(down.exit_code, 0);
  EXPECT_NE(down.err.find("cannot reach"), std::string::npos) << down.err;
}

// `kvlab compare --suite serve --url`: the served model's row from its /info and a client's load.
TEST(ServerTest, CompareServeSuiteLoadsTheServer) {
  const std::string out = work_dir() + "/compare-url";
  const ProcessResult r = kvlab({"compare", "--suite", "serve", "--url", fixture->server.url(),
                                 "--requests", "6", "--out", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json results = json::parse(kvlab::test::slurp(out + "/results.json"));
  ASSERT_EQ(results["rows"].size(), 1u);
  const json& row = results["rows"][0];
  EXPECT_EQ(row["attn"], "gqa:2");
  // 2 layers of gqa:2 over 4 heads × 16: 2 × (16 + 16) bf16 a layer; 16 MiB in pages of 16
  EXPECT_EQ(row["cache_bytes_per_token"], 2 * 2 * 32 * 2);
  EXPECT_DOUBLE_EQ(row["max_concurrency"].get<double>(), (16 << 20) / 256.0 / 256.0);
  EXPECT_TRUE(row["roofline_output_throughput"].is_null());  // not known over HTTP
  EXPECT_NEAR(row["output_throughput"].get<double>(), 32 * row["request_throughput"].get<double>(),
              1e-6 * row["output_throughput"].get<double>());
  EXPECT_EQ(results["loads"].size(), 4u);
  const std::string md = kvlab::test::slurp(out + "/results.md");
  std::filesystem::remove(out + "/results.md");
  ASSERT_EQ(kvlab({"report", out}).exit_code, 0);
  EXPECT_EQ(kvlab::test::slurp(out + "/results.md"), md);
  const ProcessResult both = kvlab({"compare", "--suite", "serve", "--url", fixture->server.url(),
                                    "--attn", "mha", "--out", out});
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("url"), std::string::npos) << both.err;
}

TEST(ServerTest, SigtermAnswersEveryRequestInFlightThenExitsZero) {
  // one sequence at a time: most of the 12 requests are waiting when SIGTERM comes, and with no
  // time to finish (--shutdown-timeout 0) they end at once as "abort"
  Server s = start_server("draining", {"--max-num-seqs", "1", "--shutdown-timeout", "0"});
  std::vector<std::string> bodies(12);
  std::vector<int> statuses(12, 0);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < bodies.size(); ++i) {
    threads.emplace_back([&, i] {
      httplib::Client c("127.0.0.1", s.port);
      c.set_read_timeout(std::chrono::seconds(60));
      const json body = {{"prompt", "in the beginning"},
                         {"max_tokens", 240},
                         {"temperature", 0.7},
                         {"stream", i % 2 == 0}};
      const httplib::Result r = c.Post("/v1/completions", body.dump(), "application/json");
      if (r) {
        statuses[i] = r->status;
        bodies[i] = r->body;
      }
    });
  }
  // SIGTERM once the server holds all 12 (1 running, 11 waiting)
  for (int i = 0; i < 400; ++i) {
    std::map<std::string, double> m = metrics(s.port);
    if (m["kvlab:num_requests_running"] + m["kvlab:num_requests_waiting"] +
            m["kvlab:request_success_total"] >=
        12) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  s.process->signal(SIGTERM);
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(s.process->wait(30), std::optional<int>(0)) << s.process->err();
  int finished = 0, aborted = 0;
  for (size_t i = 0; i < bodies.size(); ++i) {
    SCOPED_TRACE(i);
    ASSERT_EQ(statuses[i], 200) << bodies[i];
    std::string reason;
    if (i % 2 == 0) {
      EXPECT_NE(bodies[i].find("data: [DONE]"), std::string::npos);  // the stream ends properly
      const size_t at = bodies[i].find("\"finish_reason\":\"");
      ASSERT_NE(at, std::string::npos) << bodies[i];
      reason = bodies[i].substr(at + 17, bodies[i].find('"', at + 17) - at - 17);
    } else {
      reason = json::parse(bodies[i])["choices"][0]["finish_reason"];
    }
    finished += reason == "length";
    aborted += reason == "abort";
  }
  EXPECT_EQ(finished + aborted, 12);
  EXPECT_GT(aborted, 0) << "all 12 finished before the shutdown deadline: the test lost its point";
  EXPECT_NE(s.process->err().find("stopping:"), std::string::npos);
  // nothing listens any more
  httplib::Client after("127.0.0.1", s.port);
  EXPECT_FALSE(after.Get("/health"));
}

}  // namespace
