#include "experiments/eval_contexts.h"

#include <algorithm>

#include "data/task.h"
#include "spec/memory_budget.h"
#include "spec/memory_estimates.h"
#include "spec/spec_error.h"
#include "train/trainer.h"

namespace kvlab {

std::vector<ContextEvalRow> evaluate_at_contexts(nn::TransformerModelImpl& model,
                                                 const nlohmann::json& task_record,
                                                 const std::vector<int64_t>& contexts,
                                                 const std::string& data,
                                                 bool allow_different_data) {
  const ModelShape& shape = model.config().shape;
  std::vector<ContextEvalRow> rows;
  for (const int64_t context : contexts) {
    if (context <= 0) throw SpecError("context", "must be > 0, got " + std::to_string(context));
    if (shape.pos == PosScheme::kLearned && context > shape.max_context) {
      throw SpecError("context", "this model learned " + std::to_string(shape.max_context) +
                                     " positions; it cannot read a context of " +
                                     std::to_string(context));
    }
    const int64_t held_out_bytes =
        task_record.at("eval_sequences").get<int64_t>() * task_record.at("seq_len").get<int64_t>();
    nlohmann::json record = task_record;
    record["seq_len"] = context;
    record["eval_sequences"] = std::max<int64_t>(1, held_out_bytes / context);
    const auto task = data::task_from_json(record, data, allow_different_data);
    const int64_t batch = std::max<int64_t>(1, 32768 / context);
    require_memory("context", "evaluating at a context of " + std::to_string(context),
                   [&] { return evaluation_bytes(shape, batch, context); });
    const train::EvalResult e = train::evaluate(model, *task, 0, batch);
    rows.push_back({context, e.loss, e.perplexity, e.positions});
  }
  return rows;
}

}  // namespace kvlab
