#pragma once

#include <cstdint>

namespace kvlab::testing {

// Counts every heap allocation the process makes between start and stop: operator new and,
// outside sanitizer builds (whose runtimes own malloc), the C allocation functions too —
// libtorch's CPU allocator uses posix_memalign, not operator new. Linked only into the
// allocation tests' binary, which it takes over.
void start_counting_allocations();
int64_t stop_counting_allocations();  // allocations since start
// Whether C-level allocations (malloc, posix_memalign, ...) are counted in this build.
bool counts_c_allocations();

}  // namespace kvlab::testing
