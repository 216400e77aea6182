#include "nn/checkpoint.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "io/atomic_file.h"
#include "io/hf_model_config.h"
#include "io/json_document.h"
#include "io/model_config_json.h"
#include "io/safetensors.h"
#include "nn/hf_checkpoint.h"
#include "spec/memory_budget.h"
#include "spec/spec_error.h"
#include "spec/version.h"

namespace kvlab::nn {
namespace {

StDtype to_st(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat64:
      return StDtype::kF64;
    case torch::kFloat32:
      return StDtype::kF32;
    case torch::kFloat16:
      return StDtype::kF16;
    case torch::kBFloat16:
      return StDtype::kBF16;
    case torch::kInt64:
      return StDtype::kI64;
    case torch::kInt32:
      return StDtype::kI32;
    case torch::kInt16:
      return StDtype::kI16;
    case torch::kInt8:
      return StDtype::kI8;
    case torch::kUInt8:
      return StDtype::kU8;
    case torch::kBool:
      return StDtype::kBool;
    default:
      throw std::invalid_argument("no safetensors dtype for this tensor type");
  }
}

void make_dir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    throw std::runtime_error("cannot create folder '" + dir + "': " + std::strerror(errno));
  }
}

std::string shape_text(torch::IntArrayRef shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// Hugging Face names every tensor "<module>.weight" (or ".bias"); kvlab keeps the embedding
// tables as plain parameters of the trunk, so their names in the file gain ".weight". Runs
// written earlier used the bare names; load_model reads both.
constexpr std::pair<const char*, const char*> kFileNames[] = {
    {"model.embed_tokens", "model.embed_tokens.weight"},
    {"model.embed_positions", "model.embed_positions.weight"},
};

// Runs written before the shared experts became one MLP stored them as n MLPs
// ("….mlp.shared_experts.{i}.gate_proj.weight"). Their sum is one MLP of the concatenated rows
// (gate and up) and columns (down), with the down biases added; merged here in place.
void merge_old_shared_experts(std::map<std::string, torch::Tensor>& source) {
  const std::string marker = ".mlp.shared_experts.0.";
  std::vector<std::string> prefixes;  // "model.layers.3.mlp.shared_experts."
  for (const auto& [name, unused] : source) {
    const size_t at = name.find(marker);
    if (at != std::string::npos) {
      const std::string prefix = name.substr(0, at) + ".mlp.shared_experts.";
      if (prefixes.empty() || prefixes.back() != prefix) prefixes.push_back(prefix);
    }
  }
  for (const std::string& prefix : prefixes) {
    for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
      for (const char* kind : {"weight", "bias"}) {
        std::vector<torch::Tensor> parts;
        for (int i = 0;; ++i) {
          const auto it = source.find(prefix + std::to_string(i) + "." + proj + "." + kind);
          if (it == source.end()) break;
          parts.push_back(it->second);
          source.erase(it);
        }
        if (parts.empty()) continue;
        const bool down = std::string(proj) == "down_proj";
        torch::Tensor merged;
        if (down && std::string(kind) == "bias") {
          merged = parts[0];
          for (size_t i = 1; i < parts.size(); ++i) merged = merged + parts[i];
        } else {
          merged = torch::cat(parts, down ? 1 : 0);
        }
        source.emplace(prefix + proj + "." + kind, merged);
      }
    }
  }
}

}  // namespace

torch::ScalarType torch_dtype(StDtype t) {
  switch (t) {
    case StDtype::kF64:
      return torch::kFloat64;
    case StDtype::kF32:
      return torch::kFloat32;
    case StDtype::kF16:
      return torch::kFloat16;
    case StDtype::kBF16:
      return torch::kBFloat16;
    case StDtype::kI64:
      return torch::kInt64;
    case StDtype::kI32:
      return torch::kInt32;
    case StDtype::kI16:
      return torch::kInt16;
    case StDtype::kI8:
      return torch::kInt8;
    case StDtype::kU8:
      return torch::kUInt8;
    case StDtype::kBool:
      return torch::kBool;
  }
  return torch::kFloat32;
}

std::string file_tensor_name(const std::string& parameter) {
  for (const auto& [bare, file] : kFileNames) {
    if (parameter == bare) return file;
  }
  return parameter;
}

void save_tensors(const std::string& path, const std::map<std::string, torch::Tensor>& tensors) {
  std::vector<torch::Tensor> keep;  // contiguous CPU copies outlive the write
  std::vector<TensorToWrite> entries;
  for (const auto& [name, tensor] : tensors) {
    keep.push_back(tensor.detach().to(torch::kCPU).contiguous());
    const torch::Tensor& t = keep.back();
    entries.push_back({name, to_st(t.scalar_type()),
                       std::vector<int64_t>(t.sizes().begin(), t.sizes().end()), t.data_ptr(),
                       static_cast<uint64_t>(t.nbytes())});
  }
  write_safetensors(path, entries, {{"format", "pt"}});
}

std::map<std::string, torch::Tensor> load_tensors(const std::string& path) {
  const SafetensorsFile file = SafetensorsFile::read(path);
  std::map<std::string, torch::Tensor> out;
  for (const TensorInfo& info : file.tensors()) {
    torch::Tensor t =
        torch::empty(info.shape, torch::TensorOptions().dtype(torch_dtype(info.dtype)));
    if (info.nbytes() > 0) std::memcpy(t.data_ptr(), file.data(info), info.nbytes());
    out.emplace(info.name, t);
  }
  return out;
}

void copy_by_name(const std::map<std::string, torch::Tensor>& source,
                  const std::map<std::string, torch::Tensor>& targets, const std::string& what) {
  torch::NoGradGuard no_grad;
  for (const auto& [name, target] : targets) {
    const auto it = source.find(name);
    if (it == source.end()) throw SafetensorsError(what + ": tensor '" + name + "' is missing");
    if (it->second.sizes() != target.sizes()) {
      throw SafetensorsError(what + ": tensor '" + name + "' has shape " +
                             shape_text(it->second.sizes()) + ", the model needs " +
                             shape_text(target.sizes()));
    }
    if (!it->second.is_floating_point() && target.is_floating_point()) {
      throw SafetensorsError(what + ": tensor '" + name + "' is not floating point");
    }
    target.copy_(it->second);
  }
  for (const auto& [name, unused] : source) {
    if (targets.find(name) == targets.end()) {
      throw SafetensorsError(what + ": unexpected tensor '" + name + "' (not in the model)");
    }
  }
}

void save_model(const TransformerModelImpl& model, const std::string& dir,
                const nlohmann::json& extra) {
  make_dir(dir);
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& item : model.named_parameters()) {
    tensors.emplace(file_tensor_name(item.key()), item.value());
  }
  save_tensors(dir + "/model.safetensors", tensors);
  nlohmann::json config = model_config_to_json(model.config());
  config["kvlab_version"] = kVersion;
  for (const auto& [key, value] : extra.items()) config[key] = value;
  write_file_atomic(dir + "/config.json", config.dump(2) + "\n");
}

nlohmann::json read_checkpoint_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  std::string text;
  try {
    text = read_file(path, kMaxConfigBytes);
  } catch (const std::runtime_error& e) {
    throw SpecError("checkpoint",
                    std::string(e.what()) + " (is '" + dir + "' a checkpoint folder?)");
  }
  nlohmann::json config = parse_json_document(text, path, "checkpoint");
  if (!config.is_object()) throw SpecError("checkpoint", path + " holds no JSON object");
  return config;
}

TransformerModel load_model(const std::string& dir, const torch::TensorOptions& options) {
  const nlohmann::json document = read_checkpoint_config(dir);
  if (is_hf_config(document)) return load_hf_model(dir, document, options);
  const ModelConfig config = model_config_from_json(document, dir + "/config.json");
  // the weights, and the file's copy of them while they are read
  require_memory("checkpoint", "the model in " + dir + "/config.json",
                 [&] { return config.param_count() * 8; });
  TransformerModel model(config, options);
  std::map<std::string, torch::Tensor> targets;
  for (const auto& item : model->named_parameters()) {
    targets.emplace(file_tensor_name(item.key()), item.value());
  }
  const std::string path = dir + "/model.safetensors";
  std::map<std::string, torch::Tensor> source = load_tensors(path);
  for (const auto& [bare, file] : kFileNames) {
    const auto old = source.find(bare);
    if (old != source.end() && source.count(file) == 0) {
      source.emplace(file, old->second);
      source.erase(old);
    }
  }
  merge_old_shared_experts(source);
  copy_by_name(source, targets, path);
  return model;
}

std::string checkpoint_dir(const std::string& dir) {
  struct stat info {};
  const auto has_config = [&info](const std::string& folder) {
    return ::stat((folder + "/config.json").c_str(), &info) == 0;
  };
  if (has_config(dir)) return dir;
  if (has_config(dir + "/checkpoint")) return dir + "/checkpoint";
  throw SpecError("checkpoint", "'" + dir + "' holds no checkpoint (no config.json in it or in " +
                                    dir + "/checkpoint)");
}

}  // namespace kvlab::nn
