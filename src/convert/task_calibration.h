#pragma once

#include <cstdint>

#include "convert/convert_model.h"
#include "data/task.h"

namespace kvlab::convert {

// Calibration windows from a language-model task: ⌈fit_tokens / T⌉ training windows (the
// task's seeded batches, as a run would see them) to fit on, and the first held_out_windows of
// its validation windows to measure on.
Calibration task_calibration(const data::Task& task, int64_t fit_tokens, int64_t held_out_windows);

}  // namespace kvlab::convert
