#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "spec/exact.h"

namespace kvlab {

// Physical memory of this machine in bytes (sysconf), or 0 when the system does not say.
uint64_t physical_memory_bytes();

// Refuses, before anything is allocated, work whose estimated memory exceeds 90% of this
// machine's physical memory: throws SpecError(field) saying what needs how many GiB and how
// many the machine has. `estimate` returns the bytes as Exact; an estimate that overflows 2^63
// is refused the same way.
template <typename Estimate>
void require_memory(const std::string& field, const std::string& what, Estimate&& estimate);

void require_memory_bytes(const std::string& field, const std::string& what, Exact bytes);
[[noreturn]] void throw_memory_overflow(const std::string& field, const std::string& what);

template <typename Estimate>
void require_memory(const std::string& field, const std::string& what, Estimate&& estimate) {
  Exact bytes;
  try {
    bytes = estimate();
  } catch (const std::overflow_error&) {
    throw_memory_overflow(field, what);
  }
  require_memory_bytes(field, what, bytes);
}

}  // namespace kvlab
