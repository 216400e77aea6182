#pragma once

#include <pybind11/pybind11.h>

#include "cli/model_flags.h"

namespace kvlab::python {

// A Python dict of model arguments as the model flags of the CLI: "model" (a preset name),
// "hf_config" (a config.json path) and the shape fields by their flag names with underscores
// (layers, d_model, heads, head_dim, mlp, vocab, max_context, classes, mlp_kind, norm, bias,
// pos, model_kind, rope_theta, tied). None values are left unset. Throws SpecError naming an
// unknown key or a value of the wrong type.
ModelFlags model_flags(const pybind11::dict& arguments);

}  // namespace kvlab::python
