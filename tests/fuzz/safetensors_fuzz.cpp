// libFuzzer target for the safetensors reader: any input must parse or raise
// SafetensorsError, never crash, hang or read out of bounds (run under ASan).
//   cmake -B build-fuzz -DKVLAB_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++ && \
//   cmake --build build-fuzz --target safetensors_fuzz && build-fuzz/bin/safetensors_fuzz
#include <cstddef>
#include <cstdint>
#include <string>

#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const kvlab::SafetensorsFile file = kvlab::SafetensorsFile::parse(
        std::string(reinterpret_cast<const char*>(data), size), "fuzz");
    for (const kvlab::TensorInfo& t : file.tensors()) {
      volatile uint8_t sink = 0;
      if (t.nbytes() > 0) sink = file.data(t)[t.nbytes() - 1];  // touch the last byte
      (void)sink;
    }
  } catch (const kvlab::SafetensorsError&) {
  }
  return 0;
}
