#include <sstream>
#include <string>

#include "cli/cache_command.h"
#include "cli/model_flags.h"
#include "io/hf_config.h"
#include "python/bindings.h"
#include "python/model_arguments.h"
#include "spec/attention_spec.h"
#include "spec/spec_error.h"

namespace py = pybind11;

namespace kvlab::python {
namespace {

py::dict macs_dict(const AttnMacs& macs) {
  py::dict out;
  out["projections"] = macs.projections.value();
  out["mixing"] = macs.mixing.value();
  out["total"] = macs.total().value();
  return out;
}

py::dict shape_dict(const ModelShape& s) {
  py::dict out;
  out["kind"] = std::string(model_kind_name(s.kind));
  out["layers"] = s.n_layers;
  out["d_model"] = s.d_model;
  out["heads"] = s.n_heads;
  out["head_dim"] = s.head_dim;
  out["mlp"] = s.mlp_width;
  out["mlp_kind"] = std::string(mlp_kind_name(s.mlp_kind));
  out["vocab"] = s.vocab_size;
  out["max_context"] = s.max_context;
  out["norm"] = std::string(norm_kind_name(s.norm));
  out["bias"] = std::string(bias_kind_name(s.bias));
  out["pos"] = std::string(pos_scheme_name(s.pos));
  out["rope_theta"] = s.rope_theta;
  out["tied"] = s.tied_embeddings;
  return out;
}

AttentionSpec parse_spec(const std::string& text, const Preset& model, const std::string& dtype) {
  const DType cache_dtype = parse_dtype(dtype, "cache_dtype");
  return AttentionSpec::parse(text.empty() ? model.attn : text, model.shape, cache_dtype);
}

}  // namespace

void bind_spec(py::module_& m) {
  py::class_<Preset>(m, "Model",
                     "A model shape: a preset, a Hugging Face config.json, or one given field by "
                     "field (kvlab.model())")
      .def_readonly("name", &Preset::name)
      .def_readonly("description", &Preset::description)
      .def_readonly("attn", &Preset::attn, "the model's own attention, as spec text")
      .def_readonly("caveat", &Preset::caveat)
      .def_property_readonly("shape", [](const Preset& p) { return shape_dict(p.shape); })
      .def("__repr__", [](const Preset& p) { return "kvlab.Model('" + p.name + "')"; });

  m.def(
      "resolve_model",
      [](const py::dict& arguments) { return resolve_model(model_flags(arguments), ""); },
      "The model that `kvlab cache`'s flags would describe: keys model, hf_config and the shape "
      "fields (layers, d_model, heads, head_dim, ...).",
      py::arg("arguments"));
  m.def("presets", [] {
    py::list names;
    for (const Preset& p : presets()) names.append(p.name);
    return names;
  });
  m.def(
      "from_hf_config", [](const std::string& path) { return read_hf_config(path); },
      "The model a Hugging Face config.json (or a folder holding one) describes.", py::arg("path"));

  py::class_<AttentionSpec>(m, "AttentionSpec", "A parsed attention variant against a model")
      .def(py::init(&parse_spec), py::arg("text"), py::arg("model"),
           py::arg("cache_dtype") = "bf16")
      .def_property_readonly("text", &AttentionSpec::to_string, "canonical spec text")
      .def_property_readonly(
          "family",
          [](const AttentionSpec& s) { return std::string(attn_family_name(s.family())); })
      .def_property_readonly(
          "variant", [](const AttentionSpec& s) { return std::string(attn_variant_id(s.variant)); })
      .def_readonly("d_model", &AttentionSpec::d_model)
      .def_readonly("n_heads", &AttentionSpec::n_heads)
      .def_readonly("head_dim", &AttentionSpec::head_dim)
      .def_readonly("n_groups", &AttentionSpec::n_groups)
      .def_readonly("rope_dim", &AttentionSpec::rope_dim)
      .def_readonly("latent_dim", &AttentionSpec::latent_dim)
      .def_property_readonly(
          "cache_dtype",
          [](const AttentionSpec& s) { return std::string(dtype_name(s.cache_dtype)); })
      .def_property_readonly("decode_kernel",
                             [](const AttentionSpec& s) {
                               return std::string(decode_kernel_name(s.cache_layout().kernel));
                             })
      .def_property_readonly(
          "streams",
          [](const AttentionSpec& s) {
            const CacheLayout layout = s.cache_layout();
            py::list out;
            for (const CacheStream& stream : layout.streams) {
              py::dict d;
              d["name"] = std::string(stream.name());
              d["heads"] = stream.n_heads;
              d["width"] = stream.head_width;
              d["dtype"] = std::string(dtype_name(layout.stream_dtype(stream)));
              d["bytes_per_token"] = layout.token_row_bytes(stream);
              out.append(d);
            }
            return out;
          },
          "one layer's cached streams per token")
      .def_property_readonly(
          "bytes_per_token",
          [](const AttentionSpec& s) { return s.cache_layout().bytes_per_token(); },
          "one layer's cache bytes per token in the spec's cache dtype (scales included)")
      .def_property_readonly(
          "state_bytes", [](const AttentionSpec& s) { return s.cache_layout().state_bytes(); },
          "linear attention: one layer's recurrent state per sequence")
      .def_property_readonly(
          "params", [](const AttentionSpec& s) { return s.param_count().value(); },
          "one layer's parameters")
      .def(
          "prefill_macs",
          [](const AttentionSpec& s, int64_t tokens) { return macs_dict(s.prefill_macs(tokens)); },
          "one layer's multiply-adds over a prompt of n tokens (explicit form)", py::arg("tokens"))
      .def(
          "decode_macs",
          [](const AttentionSpec& s, int64_t context) { return macs_dict(s.decode_macs(context)); },
          "one layer's multiply-adds for one token at `context` cached tokens (absorbed form)",
          py::arg("context"))
      .def("__eq__", [](const AttentionSpec& a, const AttentionSpec& b) { return a == b; })
      .def("__repr__",
           [](const AttentionSpec& s) { return "kvlab.AttentionSpec('" + s.to_string() + "')"; });

  m.def(
      "cache_report_json",
      [](const py::dict& arguments, const std::vector<std::string>& attn,
         const std::string& context, int64_t batch, const std::string& dtype, bool macs) {
        CacheOptions options;
        options.model = model_flags(arguments);
        options.attn = attn;
        options.context = context;
        options.batch = batch;
        options.dtype = dtype;
        options.macs = macs;
        options.format = "json";
        std::ostringstream out;
        run_cache(options, out);
        return out.str();
      },
      "`kvlab cache --format json`'s output for the same options", py::arg("model"),
      py::arg("attn"), py::arg("context"), py::arg("batch"), py::arg("dtype"), py::arg("macs"));
}

}  // namespace kvlab::python
