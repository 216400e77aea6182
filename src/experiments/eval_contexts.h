#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nn/transformer.h"

namespace kvlab {

// Perplexity of a text checkpoint at several context lengths (seed 003 Table 16): the task's
// held-out text cut into windows of each length, the same held-out bytes at every length (as
// many windows as the training context had).
struct ContextEvalRow {
  int64_t context = 0;
  double loss = 0;  // nats per byte
  double perplexity = 0;
  int64_t positions = 0;  // held-out bytes scored
};

// task_record: the checkpoint's recorded task (config.json "task"); data and
// allow_different_data as data::task_from_json takes them. Throws SpecError naming `context`
// for a length the model cannot read or memory cannot hold.
std::vector<ContextEvalRow> evaluate_at_contexts(nn::TransformerModelImpl& model,
                                                 const nlohmann::json& task_record,
                                                 const std::vector<int64_t>& contexts,
                                                 const std::string& data,
                                                 bool allow_different_data);

}  // namespace kvlab
