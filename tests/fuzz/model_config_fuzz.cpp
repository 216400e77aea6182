// libFuzzer target for a checkpoint's config.json (the model part): any input must give a
// ModelConfig or raise SpecError, never crash (run under ASan and UBSan).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "io/json_document.h"
#include "io/model_config_json.h"
#include "spec/spec_error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const nlohmann::json doc = kvlab::parse_json_document(
        std::string_view(reinterpret_cast<const char*>(data), size), "fuzz", "checkpoint");
    (void)kvlab::model_config_from_json(doc, "fuzz");
  } catch (const kvlab::SpecError&) {
  }
  return 0;
}
