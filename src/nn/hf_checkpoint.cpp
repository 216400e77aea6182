#include "nn/hf_checkpoint.h"

#include <sys/stat.h>

#include <filesystem>
#include <map>
#include <set>

#include "io/atomic_file.h"
#include "io/hf_model_config.h"
#include "io/json_document.h"
#include "io/safetensors.h"
#include "nn/checkpoint.h"
#include "nn/hf_tensor_layout.h"
#include "spec/memory_budget.h"
#include "spec/spec_error.h"
#include "tokenizer/byte_vocabulary.h"

namespace kvlab::nn {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A sharded index names up to thousands of tensors; an error lists this many.
constexpr size_t kListedNames = 8;

std::string name_list(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < kListedNames; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > kListedNames) out += ", … (" + std::to_string(names.size()) + " in all)";
  return out;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

torch::ScalarType float_type(StDtype dtype, const std::string& what) {
  const torch::ScalarType type = torch_dtype(dtype);
  if (!at::isFloatingType(type)) {
    throw SafetensorsError(what + " is " + std::string(st_dtype_name(dtype)) +
                           ", not a floating-point type (F32, F16, BF16, F64)");
  }
  return type;
}

// Every tensor of the folder, by name, in whichever file holds it (each file mapped once).
class FolderTensors {
 public:
  explicit FolderTensors(const std::string& dir) {
    const std::string single = dir + "/model.safetensors";
    const std::string index = dir + "/model.safetensors.index.json";
    std::error_code ec;
    if (fs::exists(single, ec)) {
      files_.push_back(SafetensorsFile::read(single));
      for (const TensorInfo& t : files_[0].tensors()) where_.emplace(t.name, Location{0, &t});
      return;
    }
    if (!fs::exists(index, ec)) {
      throw SafetensorsError(dir +
                             " holds neither model.safetensors nor model.safetensors.index.json");
    }
    const json doc = read_json_document(index, "checkpoint");
    if (!doc.is_object() || !doc.contains("weight_map") || !doc.at("weight_map").is_object()) {
      throw SafetensorsError(index + ": no \"weight_map\" object");
    }
    std::map<std::string, size_t> file_of_shard;
    for (const auto& [name, shard] : doc.at("weight_map").items()) {
      if (!shard.is_string())
        throw SafetensorsError(index + ": weight_map['" + name + "'] is not a file name");
      const std::string file = shard.get<std::string>();
      if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..") {
        throw SafetensorsError(index + ": weight_map['" + name + "'] = '" + file +
                               "' is not a file name in the folder");
      }
      auto [it, added] = file_of_shard.emplace(file, files_.size());
      if (added) files_.push_back(SafetensorsFile::read(dir + "/" + file));
      const TensorInfo* info = files_[it->second].find(name);
      if (info == nullptr) {
        throw SafetensorsError(index + ": '" + name + "' is mapped to " + file +
                               ", which lacks it");
      }
      where_.emplace(name, Location{it->second, info});
    }
    for (const SafetensorsFile& f : files_) {
      for (const TensorInfo& t : f.tensors()) {
        if (where_.count(t.name) == 0) {
          throw SafetensorsError(f.source() + ": tensor '" + t.name + "' is not in " + index +
                                 "'s weight_map");
        }
      }
    }
  }

  struct Location {
    size_t file;
    const TensorInfo* info;
  };
  const std::map<std::string, Location>& tensors() const { return where_; }
  const SafetensorsFile& file(const Location& at) const { return files_[at.file]; }

 private:
  std::vector<SafetensorsFile> files_;
  std::map<std::string, Location> where_;
};

torch::Tensor view_of(const FolderTensors& folder, const FolderTensors::Location& at) {
  const SafetensorsFile& file = folder.file(at);
  const torch::ScalarType type =
      float_type(at.info->dtype, file.source() + ": '" + at.info->name + "'");
  // The mapping is read-only; the view is only read (copied into the model).
  return torch::from_blob(const_cast<uint8_t*>(file.data(*at.info)), at.info->shape,
                          torch::TensorOptions().dtype(type));
}

void write_json(const std::string& path, const json& value) {
  write_file_atomic(path, value.dump(2) + "\n");
}

}  // namespace

TransformerModel load_hf_model(const std::string& dir, const json& config,
                               const torch::TensorOptions& options) {
  const HfModel hf = hf_model_from_config(config, dir + "/config.json");
  require_memory("checkpoint", "the model in " + dir + "/config.json",
                 [&] { return hf.config.param_count() * 4; });
  TransformerModel model(hf.config, options);
  std::map<std::string, torch::Tensor> targets;
  for (const auto& item : model->named_parameters()) {
    targets.emplace(file_tensor_name(item.key()), item.value());
  }

  const FolderTensors folder(dir);
  // tensors of layers the model does not run (DeepSeek-V3's multi-token prediction)
  const auto skipped = [&](const std::string& name) {
    for (int64_t i = 0; i < hf.mtp_layers; ++i) {
      const std::string prefix =
          "model.layers." + std::to_string(hf.config.shape.n_layers + i) + ".";
      if (name.compare(0, prefix.size(), prefix) == 0) return true;
    }
    return false;
  };
  // The names and shapes the folder must hold: the model's parameters in the architecture's
  // layout, computed on the meta device (no memory).
  NamedTensors meta_parameters;
  for (const auto& [name, target] : targets) {
    meta_parameters.emplace(name, torch::empty(target.sizes(), target.options().device(at::kMeta)));
  }
  const NamedTensors expected = to_hf_layout(meta_parameters, hf.config, hf.layout);
  // The folder's tensors by the names to_hf_layout writes.
  std::map<std::string, FolderTensors::Location> stored;
  std::vector<std::string> missing, unexpected, wrong_shape;
  for (const auto& [name, at] : folder.tensors()) {
    const std::string canonical = canonical_hf_name(name, hf.layout);
    if (is_hf_buffer(canonical, hf.layout) || skipped(name)) continue;
    if (!stored.emplace(canonical, at).second) unexpected.push_back(name + " (twice)");
  }
  // Tied models may still store lm_head.weight (a copy of the embedding): read it as a check.
  const bool tied_copy = hf.config.shape.tied_embeddings && stored.count("lm_head.weight") != 0 &&
                         expected.count("lm_head.weight") == 0;
  for (const auto& [name, want] : expected) {
    const auto it = stored.find(name);
    if (it == stored.end()) {
      missing.push_back(name);
    } else if (it->second.info->shape != want.sizes().vec()) {
      wrong_shape.push_back(name + " " + shape_text(it->second.info->shape) + " (expected " +
                            shape_text(want.sizes().vec()) + ")");
    }
  }
  for (const auto& [name, unused] : stored) {
    if (expected.count(name) == 0 && !(tied_copy && name == "lm_head.weight"))
      unexpected.push_back(name);
  }
  const std::string what = dir + " (" + hf.architecture + ")";
  if (!missing.empty()) throw SafetensorsError(what + ": missing tensors: " + name_list(missing));
  if (!unexpected.empty()) {
    throw SafetensorsError(what +
                           ": unexpected tensors (not in the model): " + name_list(unexpected));
  }
  if (!wrong_shape.empty())
    throw SafetensorsError(what + ": wrong shapes: " + name_list(wrong_shape));

  torch::NoGradGuard no_grad;
  NamedTensors views;
  for (const auto& [name, want] : expected) views.emplace(name, view_of(folder, stored.at(name)));
  const NamedTensors values = from_hf_layout(views, hf.config, hf.layout);
  for (const auto& [name, target] : targets) target.copy_(values.at(name));
  if (tied_copy) {
    const torch::Tensor head = view_of(folder, stored.at("lm_head.weight"));
    if (!head.to(model->model->embed_tokens.scalar_type()).equal(model->model->embed_tokens)) {
      throw SafetensorsError(what +
                             ": tie_word_embeddings is true but lm_head.weight differs from "
                             "the token embedding");
    }
  }
  return model;
}

std::string save_hf_model(const TransformerModelImpl& model, const std::string& dir) {
  const ModelConfig& config = model.config();
  fs::create_directories(dir);
  const json hf = hf_config_for(config);
  NamedTensors tensors;
  for (const auto& item : model.named_parameters())
    tensors.emplace(file_tensor_name(item.key()), item.value().detach());
  save_tensors(dir + "/model.safetensors",
               to_hf_layout(tensors, config, hf_model_from_config(hf, "export").layout));
  write_json(dir + "/generation_config.json", {{"do_sample", false}});
  if (config.shape.kind == ModelKind::kDecoder && config.shape.vocab_size == 256) {
    write_json(dir + "/tokenizer.json", tok::byte_vocabulary_tokenizer_json());
    write_json(dir + "/tokenizer_config.json",
               tok::byte_vocabulary_tokenizer_config(config.shape.max_context));
  }
  // config.json last: a folder without it is not mistaken for a complete export.
  write_json(dir + "/config.json", hf);
  return hf.at("architectures")[0].get<std::string>();
}

}  // namespace kvlab::nn
