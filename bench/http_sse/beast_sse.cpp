// The HTTP library comparison of docs/serving.md, Boost.Beast/Asio side: the same two routes as
// httplib_sse.cpp, served asynchronously on one thread (an io_context; a steady_timer spaces the
// events). build: see README.md beside this file.
#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <utility>  // boost 1.74's asio/awaitable.hpp uses std::exchange without it

namespace net = boost::asio;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, int interval_ms)
      : stream_(std::move(socket)), timer_(stream_.get_executor()), interval_ms_(interval_ms) {}
  void start() { read(); }

 private:
  void read() {
    request_ = {};
    http::async_read(stream_, buffer_, request_,
                     [self = shared_from_this()](boost::beast::error_code ec, size_t) {
                       if (!ec) self->respond();
                     });
  }
  void respond() {
    if (request_.target() == "/v1/models") {
      auto res = std::make_shared<http::response<http::string_body>>(http::status::ok, 11);
      res->set(http::field::content_type, "application/json");
      res->body() = R"({"object":"list","data":[{"id":"sse","object":"model"}]})";
      res->prepare_payload();
      http::async_write(stream_, *res,
                        [self = shared_from_this(), res](boost::beast::error_code ec, size_t) {
                          if (!ec) self->read();
                        });
      return;
    }
    if (request_.target() != "/v1/completions") {
      auto res = std::make_shared<http::response<http::string_body>>(http::status::not_found, 11);
      res->prepare_payload();
      http::async_write(stream_, *res,
                        [self = shared_from_this(), res](boost::beast::error_code ec, size_t) {
                          if (!ec) self->read();
                        });
      return;
    }
    const nlohmann::json body = nlohmann::json::parse(request_.body());
    n_ = body.value("max_tokens", 16);
    prompt_ = body["prompt"].is_array() ? static_cast<int>(body["prompt"].size()) : 1;
    sent_ = 0;
    header_ = std::make_shared<http::response<http::empty_body>>(http::status::ok, 11);
    header_->set(http::field::content_type, "text/event-stream");
    header_->chunked(true);
    serializer_ = std::make_shared<http::response_serializer<http::empty_body>>(*header_);
    http::async_write_header(stream_, *serializer_,
                             [self = shared_from_this()](boost::beast::error_code ec, size_t) {
                               if (!ec) self->next();
                             });
  }
  void next() {
    timer_.expires_after(std::chrono::milliseconds(interval_ms_));
    timer_.async_wait([self = shared_from_this()](boost::beast::error_code ec) {
      if (ec) return;
      if (self->sent_ < self->n_) {
        ++self->sent_;
        self->event_ =
            R"(data: {"object":"text_completion","choices":[{"index":0,"text":"x","finish_reason":null}]})"
            "\n\n";
      } else {
        self->event_ =
            "data: {\"object\":\"text_completion\",\"choices\":[],\"usage\":{\"prompt_tokens\":" +
            std::to_string(self->prompt_) + ",\"completion_tokens\":" + std::to_string(self->n_) +
            "}}\n\ndata: [DONE]\n\n";
        self->last_ = true;
      }
      net::async_write(self->stream_, http::make_chunk(net::buffer(self->event_)),
                       [self](boost::beast::error_code ec, size_t) {
                         if (ec) return;
                         if (!self->last_) return self->next();
                         net::async_write(self->stream_, http::make_chunk_last(),
                                          [self](boost::beast::error_code ec, size_t) {
                                            self->last_ = false;
                                            if (!ec) self->read();
                                          });
                       });
    });
  }

  tcp::socket stream_;
  net::steady_timer timer_;
  int interval_ms_;
  boost::beast::flat_buffer buffer_;
  http::request<http::string_body> request_;
  std::shared_ptr<http::response<http::empty_body>> header_;
  std::shared_ptr<http::response_serializer<http::empty_body>> serializer_;
  std::string event_;
  int n_ = 0, prompt_ = 0, sent_ = 0;
  bool last_ = false;
};

void accept(tcp::acceptor& acceptor, int interval_ms) {
  acceptor.async_accept([&acceptor, interval_ms](boost::beast::error_code ec, tcp::socket socket) {
    if (!ec) std::make_shared<Session>(std::move(socket), interval_ms)->start();
    accept(acceptor, interval_ms);
  });
}

int main(int argc, char** argv) {
  const int port = argc > 1 ? std::atoi(argv[1]) : 8101;
  const int interval_ms = argc > 3 ? std::atoi(argv[3]) : 20;
  net::io_context io(1);
  tcp::acceptor acceptor(io,
                         {net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
  acceptor.listen(net::socket_base::max_listen_connections);
  accept(acceptor, interval_ms);
  std::cerr << "listening on http://127.0.0.1:" << port << std::endl;
  io.run();
}
