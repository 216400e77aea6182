#include "spec/memory_budget.h"

#include <unistd.h>

#include <cstdio>

#include "spec/spec_error.h"

namespace kvlab {
namespace {

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", bytes / double(uint64_t{1} << 30));
  return text;
}

}  // namespace

uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
}

void require_memory_bytes(const std::string& field, const std::string& what, Exact bytes) {
  const uint64_t machine = physical_memory_bytes();
  if (machine == 0) return;
  if (static_cast<double>(bytes.value()) > 0.9 * static_cast<double>(machine)) {
    throw SpecError(field, what + " needs about " + gib(static_cast<double>(bytes.value())) +
                               " GiB, more than this machine's " +
                               gib(static_cast<double>(machine)) + " GiB of memory allows");
  }
}

void throw_memory_overflow(const std::string& field, const std::string& what) {
  throw SpecError(field, what + " needs more than 2^63 bytes");
}

}  // namespace kvlab
