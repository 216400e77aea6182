#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace kvlab {

// Checks that a `kvlab compare` results.json has every field its suite's report reads, with
// the right JSON type (integers where counts are read, [step, loss] pairs in every curve), so
// that rendering a report from a damaged or hand-edited file fails with a message instead of
// reading out of bounds or converting a number that does not fit. Throws SpecError whose field
// is the JSON path ("runs[3].curve[0]") and whose message names `source`.
void validate_results_json(const nlohmann::json& results, const std::string& source);

}  // namespace kvlab
