#pragma once

// The Python package's extension module (_kvlab): one bind_* per area, each in its own file.
#include <torch/extension.h>

namespace kvlab::python {

// kvlab.Model, kvlab.AttentionSpec, the cache report (spec_bindings.cpp)
void bind_spec(pybind11::module_& m);
// the attention modules and whole models as torch::nn::Module (nn_bindings.cpp)
void bind_nn(pybind11::module_& m);
// kvlab generate's text generator and the decode runtime's Generator (generator_bindings.cpp)
void bind_generator(pybind11::module_& m);

}  // namespace kvlab::python
