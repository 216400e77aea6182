#include "cli/interrupt.h"

#include <unistd.h>

#include <csignal>
#include <cstring>

namespace kvlab {
namespace {

// Written only by the handlers and by DeferredInterrupt; lock-free atomics are
// async-signal-safe.
std::atomic<bool> g_stop_requested{false};
std::atomic<int> g_deferred{0};

constexpr unsigned kGraceSeconds = 1;

void write_stderr(const char* text) {
  const ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

extern "C" void on_alarm(int) {
  write_stderr("\nkvlab: interrupted\n");
  ::_exit(130);
}

extern "C" void on_stop_signal(int) {
  if (g_stop_requested.exchange(true)) {
    write_stderr("\nkvlab: interrupted again: exiting now\n");
    ::_exit(130);
  }
  if (g_deferred.load() == 0) ::alarm(kGraceSeconds);
}

}  // namespace

void install_interrupt_handlers() {
  struct sigaction action {};
  sigemptyset(&action.sa_mask);
  // interrupted reads and writes resume: a stop request must not cut a log line or a file
  action.sa_flags = SA_RESTART;
  action.sa_handler = on_stop_signal;
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
  action.sa_handler = on_alarm;
  ::sigaction(SIGALRM, &action, nullptr);
}

const std::atomic<bool>* interrupt_flag() { return &g_stop_requested; }

DeferredInterrupt::DeferredInterrupt() { g_deferred.fetch_add(1); }

DeferredInterrupt::~DeferredInterrupt() {
  // a stop requested while deferred and not acted on still ends the process
  if (g_deferred.fetch_sub(1) == 1 && g_stop_requested.load()) ::alarm(kGraceSeconds);
}

}  // namespace kvlab
