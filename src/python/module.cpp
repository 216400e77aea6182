#include "nn/threads.h"
#include "python/bindings.h"
#include "spec/spec_error.h"

// import torch first: the modules' classes derive from torch._C's binding of torch::nn::Module,
// and the torch.ops.kvlab operators (ops.cpp) register when this library loads.
PYBIND11_MODULE(_kvlab, m) {
  m.doc() = "kvlab's C++ core: attention specs, modules, kernels and the decode runtime";
  // A SpecError names the field (what() reads "field: message"): a ValueError in Python.
  pybind11::register_exception<kvlab::SpecError>(m, "SpecError", PyExc_ValueError);
  m.def("set_threads", &kvlab::nn::set_threads,
        "Sets libtorch's OpenMP pool and OpenBLAS's own pool (torch.set_num_threads bounds only "
        "the first; two pools of all cores on the same cores slow training down); 0: all cores. "
        "Returns the count set.",
        pybind11::arg("threads"));
  kvlab::python::bind_spec(m);
  kvlab::python::bind_nn(m);
  kvlab::python::bind_generator(m);
}
