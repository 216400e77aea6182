#include <map>
#include <string>

#include "io/model_config_json.h"
#include "nn/attention.h"
#include "nn/checkpoint.h"
#include "nn/transformer.h"
#include "python/bindings.h"
#include "python/model_arguments.h"
#include "spec/model_config.h"

namespace py = pybind11;

namespace kvlab::python {
namespace {

ModelConfig model_config(const py::dict& model_arguments, const std::string& attn) {
  const Preset model = resolve_model(model_flags(model_arguments), "");
  return ModelConfig::make(model.shape, attn.empty() ? model.attn : attn, DType::kBf16);
}

}  // namespace

void bind_nn(py::module_& m) {
  // The C++ modules, bound with torch's own helpers: parameters, train/eval, to(); kvlab.nn wraps
  // each in torch.nn.cpp.ModuleWrapper, a torch.nn.Module over the same tensors.
  torch::python::bind_module<nn::AttentionImpl, /*force_enable=*/true>(m, "AttentionModule")
      .def(
          "forward",
          [](nn::AttentionImpl& attention, const torch::Tensor& x, int64_t start_pos) {
            return attention.forward(x, start_pos);  // [B, T, D] -> [B, T, D]
          },
          py::arg("x"), py::arg("start_pos") = 0)
      .def_property_readonly("spec",
                             [](const nn::AttentionImpl& a) { return a.spec().to_string(); })
      .def("use_fused_attention", &nn::AttentionImpl::use_fused_attention, py::arg("fused"));
  torch::python::bind_module<nn::TransformerModelImpl, /*force_enable=*/true>(m, "TransformerModel")
      .def(
          "forward",
          [](nn::TransformerModelImpl& model, const torch::Tensor& input, int64_t start_pos) {
            return model.forward(input, start_pos);  // tokens [B, T] -> logits [B, T, V]
          },
          py::arg("input"), py::arg("start_pos") = 0)
      .def_property_readonly(
          "attn",
          [](const nn::TransformerModelImpl& model) { return model.config().attn.to_string(); })
      .def_property_readonly("config_json", [](const nn::TransformerModelImpl& model) {
        return model_config_to_json(model.config()).dump();
      });

  m.def(
      "make_attention",
      [](const std::string& attn, const py::dict& model_arguments, py::object dtype) {
        const ModelConfig config = model_config(model_arguments, attn);
        const auto scalar_type = torch::python::detail::py_object_to_dtype(std::move(dtype));
        return nn::make_attention(config.attn, torch::TensorOptions().dtype(scalar_type));
      },
      py::arg("attn"), py::arg("model"), py::arg("dtype"));
  m.def(
      "make_model",
      [](const py::dict& model_arguments, const std::string& attn) {
        return nn::TransformerModel(model_config(model_arguments, attn), torch::kFloat32).ptr();
      },
      "A new model of the shape and attention, initialised as `kvlab train` does", py::arg("model"),
      py::arg("attn"));
  m.def(
      "load_model",
      [](const std::string& path) { return nn::load_model(nn::checkpoint_dir(path)).ptr(); },
      "A kvlab checkpoint (or run) folder, or a Hugging Face folder, at f32", py::arg("path"));
  m.def(
      "save_checkpoint",
      [](const nn::TransformerModelImpl& model, const std::string& dir) {
        nn::save_model(model, dir);
      },
      "Saves the model as a kvlab checkpoint folder", py::arg("model"), py::arg("dir"));
  m.def(
      "save_model",
      [](const std::map<std::string, torch::Tensor>& state, const py::dict& model_arguments,
         const std::string& attn, const std::string& dir) {
        // Every tensor of the checkpoint must be in the state with its shape, and nothing else, as
        // when a checkpoint loads.
        nn::TransformerModel model(model_config(model_arguments, attn), torch::kFloat32);
        std::map<std::string, torch::Tensor> targets;
        for (const auto& item : model->named_parameters()) {
          targets.emplace(nn::file_tensor_name(item.key()), item.value());
        }
        std::map<std::string, torch::Tensor> source;
        for (const auto& [name, tensor] : state) {
          // a kvlab model's own parameter names ("model.embed_tokens") or the file's
          source.emplace(nn::file_tensor_name(name), tensor.detach());
        }
        nn::copy_by_name(source, targets, "state_dict");
        nn::save_model(*model, dir);
      },
      "Saves a state dict named as kvlab's checkpoints name their tensors as a checkpoint of "
      "that shape and attention",
      py::arg("state"), py::arg("model"), py::arg("attn"), py::arg("dir"));
}

}  // namespace kvlab::python
