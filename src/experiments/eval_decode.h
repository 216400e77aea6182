#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "data/task.h"
#include "nn/transformer.h"

namespace kvlab {

// `kvlab eval --attn-precision P`: the held-out text through the decode path in f32 and in P
// ("f32", "bf16" or "auto"): loss, perplexity, the change against f32, greedy agreement.
// `seed`: the run's, as plain eval uses (the same held-out windows).
int run_eval_decode(const std::string& precision, const std::string& cache_dtype, int threads,
                    const data::Task& task, uint64_t seed, nn::TransformerModel& model,
                    const std::string& format, std::ostream& out);

}  // namespace kvlab
