#pragma once

#include <string_view>

namespace kvlab::serve {

// The page `kvlab serve` answers GET / with: the model, its attention variant and cache
// arithmetic (GET /info), live metrics (GET /metrics every second) and a prompt box that streams
// a completion. Plain HTML, CSS and JavaScript in the binary: no build step, nothing fetched from
// elsewhere.
std::string_view index_html();

}  // namespace kvlab::serve
