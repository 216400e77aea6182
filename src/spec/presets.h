#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "spec/model_shape.h"

namespace kvlab {

// A named model: its shape, the attention it ships with, and where the numbers come from.
struct Preset {
  std::string name;
  std::string description;
  ModelShape shape;
  std::string attn;    // the model's own attention, as spec text
  std::string caveat;  // what is not exact about this preset; empty when everything is
};

const std::vector<Preset>& presets();
// Throws SpecError("model") listing the known names.
const Preset& find_preset(std::string_view name);

}  // namespace kvlab
