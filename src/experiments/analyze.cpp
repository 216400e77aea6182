#include "experiments/analyze.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "data/task.h"
#include "io/atomic_file.h"
#include "io/hf_model_config.h"
#include "nn/checkpoint.h"
#include "nn/gva_attention.h"
#include "nn/standard_attention.h"
#include "nn/threads.h"
#include "report/svg_plot.h"
#include "report/table.h"
#include "spec/spec_error.h"
#include "tokenizer/tokenizer.h"

namespace kvlab {
namespace {

using nlohmann::json;

// Cosine of the angle between two weight matrices seen as vectors; null when either is
// missing or their shapes differ.
json cosine(const torch::Tensor& a, const torch::Tensor& b) {
  if (!a.defined() || !b.defined() || a.sizes() != b.sizes()) return nullptr;
  const torch::Tensor x = a.to(torch::kFloat64).flatten(), y = b.to(torch::kFloat64).flatten();
  return (x.dot(y) / (x.norm() * y.norm())).item<double>();
}

// Effective rank (Roy & Vetterli 2007): exp of the entropy of the normalised singular values.
json effective_rank(const torch::Tensor& w) {
  if (!w.defined()) return nullptr;
  const torch::Tensor s = torch::linalg::svdvals(w.to(torch::kFloat64), c10::nullopt);
  const torch::Tensor p = s / s.sum();
  const torch::Tensor nz = p.masked_select(p > 0);
  return std::exp(-(nz * nz.log()).sum().item<double>());
}

std::string cell(const json& v, const char* format) {
  return v.is_number() ? fmt::format(fmt::runtime(format), v.get<double>()) : "—";
}

// One example input of the checkpoint's task: its first held-out example, or `text`'s bytes
// for a byte-level text task.
torch::Tensor example_input(const data::Task& task, const std::string& text) {
  if (!text.empty()) {
    // every map has T² cells for every head and layer: 256 bytes already make 65,536 a map
    constexpr size_t kMaxInputBytes = 256;
    if (text.size() > kMaxInputBytes) {
      throw SpecError("input", "is " + std::to_string(text.size()) + " bytes; attention maps " +
                                   "are drawn for at most " + std::to_string(kMaxInputBytes));
    }
    if (task.name() != "text" && task.name() != "kjv") {
      throw SpecError("input",
                      "--input is byte-level text; this checkpoint's task is " + task.name());
    }
    torch::Tensor t = torch::empty({1, static_cast<int64_t>(text.size())}, torch::kInt64);
    for (size_t i = 0; i < text.size(); ++i) {
      t[0][static_cast<int64_t>(i)] = static_cast<int64_t>(static_cast<uint8_t>(text[i]));
    }
    return t;
  }
  const std::vector<data::Batch> batches = task.eval_batches(0, 1);
  if (batches.empty()) throw SpecError("checkpoint", "the task has no held-out example");
  return batches.front().inputs.narrow(0, 0, 1);
}

// A Hugging Face folder has no task: the maps are drawn for --input, tokenized by the folder's
// tokenizer.json (or as bytes for a byte-vocabulary model without one).
torch::Tensor folder_input(const std::string& dir, const ModelShape& shape,
                           const std::string& text) {
  if (text.empty()) {
    throw SpecError("input", dir +
                                 " is a model folder without a task: give the text whose "
                                 "attention maps are drawn with --input TEXT");
  }
  std::vector<int64_t> ids;
  if (std::filesystem::exists(dir + "/tokenizer.json")) {
    for (const int32_t id : tok::Tokenizer::load(dir).encode(text, true)) ids.push_back(id);
  } else if (shape.vocab_size == 256) {
    for (const unsigned char c : text) ids.push_back(c);
  } else {
    throw SpecError("input", dir + " has no tokenizer.json to read --input with");
  }
  constexpr size_t kMaxTokens = 256;  // T² cells a map, for every head and layer
  if (ids.size() > kMaxTokens) {
    throw SpecError("input", "is " + std::to_string(ids.size()) +
                                 " tokens; attention maps are drawn for at most " +
                                 std::to_string(kMaxTokens));
  }
  return torch::tensor(ids, torch::kInt64).view({1, -1});
}

}  // namespace

int run_analyze(const AnalyzeOptions& o, std::ostream& out) {
  nn::set_threads(o.threads);
  const std::string dir = nn::checkpoint_dir(o.checkpoint);
  const json config = nn::read_checkpoint_config(dir);
  const bool folder = is_hf_config(config);
  if (!folder && !config.contains("task")) {
    throw SpecError("checkpoint", dir + "/config.json names no task");
  }
  const auto task = folder ? nullptr : data::task_from_json(config["task"]);
  nn::TransformerModel model = nn::load_model(dir);
  const std::string attn_text = model->config().attn.to_string();
  std::filesystem::create_directories(o.out);

  json layers = json::array();
  Table table({"layer", "cos(K,V)", "cos(Q,K)", "cos(Q,V)", "erank Q", "erank K", "erank V"});
  std::vector<nn::AttentionImpl*> attns;
  for (size_t l = 0; l < model->model->layers->size(); ++l) {
    auto* block = model->model->layers[l]->as<nn::TransformerBlockImpl>();
    nn::AttentionImpl& attn = *block->self_attn;
    attns.push_back(&attn);
    const nn::AttentionImpl::ProjectionWeights p = attn.projection_weights();
    auto full = [](const torch::Tensor& w) {
      return w.defined() ? std::min(w.size(0), w.size(1)) : 0;
    };
    const json row = {{"layer", l},
                      {"cos_kv", cosine(p.k, p.v)},
                      {"cos_qk", cosine(p.q, p.k)},
                      {"cos_qv", cosine(p.q, p.v)},
                      {"erank_q", effective_rank(p.q)},
                      {"erank_k", effective_rank(p.k)},
                      {"erank_v", effective_rank(p.v)},
                      {"max_rank_q", full(p.q)},
                      {"max_rank_k", full(p.k)},
                      {"max_rank_v", full(p.v)},
                      {"shared_kv", p.k.defined() && p.k.is_same(p.v)},
                      {"shared_qk", p.q.defined() && p.q.is_same(p.k)}};
    layers.push_back(row);
    auto rank_cell = [&](const char* key, const torch::Tensor& w) {
      return row[key].is_number() ? fmt::format("{:.1f} / {}", row[key].get<double>(), full(w))
                                  : std::string("—");
    };
    table.add_row({std::to_string(l), cell(row["cos_kv"], "{:.3f}"), cell(row["cos_qk"], "{:.3f}"),
                   cell(row["cos_qv"], "{:.3f}"), rank_cell("erank_q", p.q),
                   rank_cell("erank_k", p.k), rank_cell("erank_v", p.v)});
  }

  // Attention maps of one example.
  const torch::Tensor input =
      folder ? folder_input(dir, model->config().shape, o.input) : example_input(*task, o.input);
  for (nn::AttentionImpl* a : attns) a->keep_attention_maps(true);
  {
    c10::InferenceMode guard;
    model->forward(input);
  }
  std::vector<std::string> maps;
  for (size_t l = 0; l < attns.size(); ++l) {
    const torch::Tensor m = attns[l]->last_attention_map();
    attns[l]->keep_attention_maps(false);
    if (!m.defined()) continue;  // linear attention keeps no probabilities
    const torch::Tensor heads = m[0].to(torch::kFloat64).contiguous();  // [H, Tq, Tk]
    auto matrix = [](const torch::Tensor& t) {
      std::vector<std::vector<double>> rows(static_cast<size_t>(t.size(0)));
      for (int64_t i = 0; i < t.size(0); ++i) {
        const torch::Tensor r = t[i].contiguous();
        rows[static_cast<size_t>(i)].assign(r.data_ptr<double>(), r.data_ptr<double>() + r.numel());
      }
      return rows;
    };
    for (int64_t h = 0; h <= heads.size(0); ++h) {
      const bool mean = h == heads.size(0);
      const std::string name = mean ? fmt::format("attention_l{}_mean.svg", l)
                                    : fmt::format("attention_l{}_h{}.svg", l, h);
      const std::string title = fmt::format("{} layer {} {}", attn_text, l,
                                            mean ? "mean over heads" : fmt::format("head {}", h));
      write_file_atomic(o.out + "/" + name, svg_heat_map(title, "key position", "query position",
                                                         matrix(mean ? heads.mean(0) : heads[h])));
      maps.push_back(name);
    }
  }
  // a folder's "task" is the text its maps were drawn for
  const std::string subject = folder ? "the model folder's --input" : task->name();
  const json doc = {{"checkpoint", dir},
                    {"attn", attn_text},
                    {"task", subject},
                    {"layers", layers},
                    {"attention_maps", maps},
                    {"definitions",
                     {{"cos",
                       "cosine of the angle between two projection matrices flattened to "
                       "vectors; null where shapes differ or a matrix is absent"},
                      {"erank",
                       "exp of the entropy of the normalised singular values (Roy & "
                       "Vetterli 2007)"}}}};
  write_file_atomic(o.out + "/analysis.json", doc.dump(2) + "\n");
  const std::string md = fmt::format(
      "# kvlab analyze: {} on {}\n\n"
      "cos: cosine of two projection matrices flattened to vectors (— where shapes differ or "
      "a matrix is absent; 1 where the variant shares the projection). erank: effective rank, "
      "exp of the entropy of the normalised singular values, out of the largest possible. "
      "Seed 003 §5 reports, for a 1.2B QKV model, cos(K,V) 0.73, cos(Q,K) 0.42, cos(Q,V) 0.31 "
      "and effective ranks 687 (K) and 702 (V) of 1024.\n\n{}\nAttention maps ({}): {}\n",
      attn_text, subject, table.to_markdown(), maps.size(),
      maps.empty() ? "none (linear attention has no softmax map)" : o.out);
  write_file_atomic(o.out + "/analysis.md", md);
  out << md;
  return 0;
}

}  // namespace kvlab
