#pragma once

#include <atomic>

namespace kvlab {

// Ctrl-C and SIGTERM for every subcommand. The first signal sets the stop flag that long
// loops poll (training saves a checkpoint and stops; generation, evaluation and benchmarks
// stop at their next step). Unless a stop is being handled — see DeferredInterrupt — the
// process then ends with exit status 130 at most one second later wherever it is (a blocking
// read of a FIFO, a long libtorch call). A second signal ends it at once.
void install_interrupt_handlers();

// The flag the first SIGINT or SIGTERM sets. A signal handler can reach nothing else, hence
// process-wide.
const std::atomic<bool>* interrupt_flag();

// While one of these lives, a stop request waits for the code that polls the flag (training,
// which must save before it exits) instead of ending the process after a second.
class DeferredInterrupt {
 public:
  DeferredInterrupt();
  ~DeferredInterrupt();
  DeferredInterrupt(const DeferredInterrupt&) = delete;
  DeferredInterrupt& operator=(const DeferredInterrupt&) = delete;
};

}  // namespace kvlab
