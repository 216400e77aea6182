// libFuzzer target for the Hugging Face config.json reader: any input must give a Preset or
// raise SpecError, never crash, hang or overflow the stack (run under ASan and UBSan).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "io/hf_config.h"
#include "spec/spec_error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    (void)kvlab::parse_hf_config(std::string_view(reinterpret_cast<const char*>(data), size),
                                 "fuzz");
  } catch (const kvlab::SpecError&) {
  }
  return 0;
}
