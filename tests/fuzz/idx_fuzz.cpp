// libFuzzer target for the IDX header reader (Fashion-MNIST's format): any bytes must give
// dimensions whose product is the payload, or raise SpecError; never crash or overflow (run
// under ASan and UBSan). The first byte picks the dimension count (1 to 3, as kvlab reads).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "io/idx.h"
#include "spec/spec_error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int dims = 1 + data[0] % 3;
  const std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    const std::vector<int64_t> shape = kvlab::parse_idx_header(bytes, dims, "fuzz");
    uint64_t product = 1;
    for (int64_t d : shape) product *= static_cast<uint64_t>(d);
    if (product != bytes.size() - 4 - 4 * static_cast<size_t>(dims)) __builtin_trap();
  } catch (const kvlab::SpecError&) {
  }
  return 0;
}
