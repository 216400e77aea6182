#pragma once

#include <CLI/CLI.hpp>

namespace kvlab {

// Adds to every option of `app` and its subcommands the check its type needs, so that no
// flag silently takes a value it cannot hold: an integer flag refuses text that is not a
// decimal integer or that does not fit 64 bits (CLI11 would clamp 99999999999999999999), a
// floating-point flag refuses NaN and infinities. Range checks stay with each flag.
void check_numeric_flags(CLI::App& app);

}  // namespace kvlab
