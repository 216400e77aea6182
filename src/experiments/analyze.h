#pragma once

#include <ostream>
#include <string>

namespace kvlab {

struct AnalyzeOptions {
  std::string checkpoint;
  std::string out;
  // byte-level text tasks and Hugging Face folders: the text whose attention maps are drawn
  std::string input;
  int threads = 0;
};

// Per layer: cosine similarity of the Q, K and V projection weights and the effective rank
// of each (seed 003 §5), attention maps of one input as heat maps. Writes analysis.json,
// analysis.md and attention_l{layer}_h{head}.svg (plus a head-mean map per layer) to --out.
int run_analyze(const AnalyzeOptions& options, std::ostream& out);

}  // namespace kvlab
