#pragma once

#include <string>

namespace kvlab {

// Makes glibc's malloc keep the memory the program frees for its next allocations instead of
// returning it to the kernel. A training step allocates and frees the same activation
// tensors every step; by default every block of 128 KiB or more is a fresh mmap, so each step
// pays a page fault for every 4 KiB it touches again (6 ms to fill a new 8 MiB tensor on
// the VMs kvlab is measured on, against 0.1 ms for reused memory). Blocks up to 32 MiB —
// glibc's limit for this setting — come from the heap instead, and freed heap memory is not
// trimmed. The cost: the process keeps its peak heap until it exits. Returns false if glibc
// refused a setting (the program runs on with the default).
bool keep_freed_memory_for_reuse();

// The same settings as a GLIBC_TUNABLES value, for a child process that should allocate the
// way kvlab does (the PyTorch twin of `bench train --compare-pytorch`).
std::string glibc_tunables_for_reuse();

}  // namespace kvlab
