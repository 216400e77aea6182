// The HTTP library comparison of docs/serving.md, cpp-httplib side: POST /v1/completions streams
// max_tokens SSE events, one every --interval-ms (a model producing tokens), on cpp-httplib's
// thread-per-connection pool; GET /v1/models names the model. `kvlab bench serve` drives it.
// build: see README.md beside this file.
#include <httplib.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

// cpp-httplib 0.11 listens with a backlog of 5; kvlab serve raises it the same way
struct Server : httplib::Server {
  int socket() const { return svr_sock_; }
};

int main(int argc, char** argv) {
  const int port = argc > 1 ? std::atoi(argv[1]) : 8100;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 512;
  const int interval_ms = argc > 3 ? std::atoi(argv[3]) : 20;
  Server http;
  http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  http.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"object":"list","data":[{"id":"sse","object":"model"}]})",
                    "application/json");
  });
  http.Post("/v1/completions", [interval_ms](const httplib::Request& req, httplib::Response& res) {
    const nlohmann::json body = nlohmann::json::parse(req.body);
    const int n = body.value("max_tokens", 16);
    const int prompt = body["prompt"].is_array() ? static_cast<int>(body["prompt"].size()) : 1;
    auto sent = std::make_shared<int>(0);
    res.set_chunked_content_provider("text/event-stream", [n, prompt, sent, interval_ms](
                                                              size_t, httplib::DataSink& sink) {
      std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
      std::string event;
      if (*sent < n) {
        ++*sent;
        event =
            R"(data: {"object":"text_completion","choices":[{"index":0,"text":"x","finish_reason":null}]})"
            "\n\n";
      } else {
        event =
            "data: {\"object\":\"text_completion\",\"choices\":[],\"usage\":{\"prompt_tokens\":" +
            std::to_string(prompt) + ",\"completion_tokens\":" + std::to_string(n) +
            "}}\n\ndata: [DONE]\n\n";
      }
      if (!sink.write(event.data(), event.size())) return false;
      if (*sent == n && event.find("[DONE]") != std::string::npos) sink.done();
      return true;
    });
  });
  if (!http.bind_to_port("127.0.0.1", port)) return 1;
  ::listen(http.socket(), SOMAXCONN);
  std::cerr << "listening on http://127.0.0.1:" << port << std::endl;
  http.listen_after_bind();
}
