#include "python/model_arguments.h"

#include <string>

#include "spec/spec_error.h"

namespace py = pybind11;

namespace kvlab::python {
namespace {

template <typename T>
T cast_argument(const std::string& key, const py::handle& value, const char* expected) {
  try {
    return value.cast<T>();
  } catch (const py::cast_error&) {
    throw SpecError(key, std::string("expected ") + expected + ", got " +
                             std::string(py::str(py::type::of(value).attr("__name__"))));
  }
}

}  // namespace

ModelFlags model_flags(const py::dict& arguments) {
  ModelFlags f;
  for (const auto& [key_handle, value] : arguments) {
    const std::string key = py::str(key_handle);
    if (value.is_none()) continue;
    const auto integer = [&] { return cast_argument<int64_t>(key, value, "an int"); };
    const auto text = [&] { return cast_argument<std::string>(key, value, "a str"); };
    if (key == "model")
      f.model = text();
    else if (key == "hf_config")
      f.hf_config = text();
    else if (key == "layers")
      f.layers = integer();
    else if (key == "d_model")
      f.d_model = integer();
    else if (key == "heads")
      f.heads = integer();
    else if (key == "head_dim")
      f.head_dim = integer();
    else if (key == "mlp")
      f.mlp = integer();
    else if (key == "vocab")
      f.vocab = integer();
    else if (key == "max_context")
      f.max_context = integer();
    else if (key == "classes")
      f.classes = integer();
    else if (key == "mlp_kind")
      f.mlp_kind = text();
    else if (key == "norm")
      f.norm = text();
    else if (key == "bias")
      f.bias = text();
    else if (key == "pos")
      f.pos = text();
    else if (key == "model_kind")
      f.model_kind = text();
    else if (key == "rope_theta")
      f.rope_theta = cast_argument<double>(key, value, "a float");
    else if (key == "tied")
      (cast_argument<bool>(key, value, "a bool") ? f.tied : f.untied) = true;
    else {
      throw SpecError(key,
                      "is not a model argument (model, hf_config, layers, d_model, heads, "
                      "head_dim, mlp, vocab, max_context, classes, mlp_kind, norm, bias, "
                      "pos, model_kind, rope_theta, tied)");
    }
  }
  return f;
}

}  // namespace kvlab::python
