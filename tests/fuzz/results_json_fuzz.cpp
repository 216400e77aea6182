// libFuzzer target for a compare suite's results.json: a document either fails validation
// with SpecError or has every field the report reads, with its type (checked here by reading
// them the way the renderers do). Never a crash (run under ASan and UBSan).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "io/json_document.h"
#include "io/results_json.h"
#include "spec/spec_error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json doc;
  try {
    doc = kvlab::parse_json_document(std::string_view(reinterpret_cast<const char*>(data), size),
                                     "fuzz", "results");
    kvlab::validate_results_json(doc, "fuzz");
  } catch (const kvlab::SpecError&) {
    return 0;
  }
  // what the renderers read: every run's curve as [int step, number loss]
  volatile double sink = 0;
  for (const nlohmann::json& run : doc.at("runs")) {
    for (const nlohmann::json& point : run.at("curve")) {
      sink = sink + static_cast<double>(point.at(0).get<int64_t>()) + point.at(1).get<double>();
    }
  }
  return 0;
}
