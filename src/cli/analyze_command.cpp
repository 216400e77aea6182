#include "cli/analyze_command.h"

namespace kvlab {

CLI::App* add_analyze_command(CLI::App& app, AnalyzeOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "analyze",
      "Projection analysis of a trained checkpoint (seed 003 §5): per layer, cosine similarity "
      "of the Q, K and V weights and their effective ranks, and attention maps of one input as "
      "heat maps");
  cmd->add_option("--checkpoint", o.checkpoint, "Checkpoint folder (or a run folder)")->required();
  cmd->add_option("--out", o.out, "Folder for analysis.json, analysis.md and the maps")->required();
  cmd->add_option("--input", o.input,
                  "Text whose attention maps are drawn, at most 256 bytes (byte-level text "
                  "tasks; default: the task's first held-out example) or, for a Hugging Face "
                  "folder (required there), 256 tokens of its tokenizer.json");
  cmd->add_option("--threads", o.threads, "Threads (0: all cores)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  return cmd;
}

}  // namespace kvlab
