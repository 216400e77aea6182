#include "io/results_json.h"

#include <initializer_list>

#include "io/json_document.h"
#include "spec/spec_error.h"

namespace kvlab {
namespace {

using nlohmann::json;

enum class Kind { kInteger, kNumber, kString, kNumberOrNull };

// One file's check: every error names the file and the path of the value.
class Checker {
 public:
  explicit Checker(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const std::string& path, const std::string& problem) const {
    throw SpecError(path, source_ + ": " + problem);
  }

  const json& member(const json& object, const std::string& path, const char* key) const {
    if (!object.is_object()) fail(path, "must be an object");
    if (!object.contains(key)) fail(join(path, key), "is missing");
    return object.at(key);
  }

  void value(const json& object, const std::string& path, const char* key, Kind kind) const {
    const json& v = member(object, path, key);
    const std::string at = join(path, key);
    switch (kind) {
      case Kind::kInteger:
        if (!v.is_number_integer()) fail(at, "must be an integer, got " + json_excerpt(v));
        break;
      case Kind::kNumber:
        if (!v.is_number()) fail(at, "must be a number, got " + json_excerpt(v));
        break;
      case Kind::kNumberOrNull:
        if (!v.is_number() && !v.is_null()) fail(at, "must be a number or null");
        break;
      case Kind::kString:
        if (!v.is_string()) fail(at, "must be a string, got " + json_excerpt(v));
        break;
    }
  }

  void values(const json& object, const std::string& path, std::initializer_list<const char*> keys,
              Kind kind) const {
    for (const char* key : keys) value(object, path, key, kind);
  }

  // An array at object[key]; `each` checks its elements (objects) with their paths.
  template <typename Each>
  void array(const json& object, const std::string& path, const char* key, Each&& each,
             bool non_empty = false) const {
    const json& a = member(object, path, key);
    const std::string at = join(path, key);
    if (!a.is_array()) fail(at, "must be an array");
    if (non_empty && a.empty()) fail(at, "must not be empty");
    for (size_t i = 0; i < a.size(); ++i) {
      const std::string item = at + "[" + std::to_string(i) + "]";
      if (!a[i].is_object()) fail(item, "must be an object");
      each(a[i], item);
    }
  }

  // A run's training-loss curve: [[step, loss], ...] with integer steps.
  void curve(const json& run, const std::string& path) const {
    const json& c = member(run, path, "curve");
    const std::string at = join(path, "curve");
    if (!c.is_array()) fail(at, "must be an array of [step, loss] pairs");
    for (size_t i = 0; i < c.size(); ++i) {
      const json& point = c[i];
      if (!point.is_array() || point.size() != 2 || !point[0].is_number_integer() ||
          !point[1].is_number()) {
        fail(at + "[" + std::to_string(i) + "]",
             "must be a [step, loss] pair (integer, number), got " + json_excerpt(point));
      }
    }
  }

 private:
  static std::string join(const std::string& path, const char* key) {
    return path.empty() ? key : path + "." + key;
  }
  std::string source_;
};

void check_synthetic(const json& r, const Checker& c) {
  c.value(r, "", "preset", Kind::kString);
  c.value(r, "", "seeds", Kind::kInteger);
  const json& tasks = c.member(r, "", "tasks");
  if (!tasks.is_array()) c.fail("tasks", "must be an array of task names");
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (!tasks[i].is_string()) c.fail("tasks[" + std::to_string(i) + "]", "must be a string");
  }
  c.array(
      r, "", "configs",
      [&](const json& config, const std::string& path) {
        c.values(config, path, {"d_model", "layers", "heads", "seq_len", "steps", "batch"},
                 Kind::kInteger);
      },
      /*non_empty=*/true);
  c.array(r, "", "variants", [&](const json& v, const std::string& path) {
    c.value(v, path, "attn", Kind::kString);
    c.values(v, path, {"average", "average_std"}, Kind::kNumber);
    c.value(v, path, "paper_average", Kind::kNumberOrNull);
    c.values(v, path, {"params", "cached_scalars_per_token"}, Kind::kInteger);
  });
  c.array(r, "", "aggregates", [&](const json& a, const std::string& path) {
    c.values(a, path, {"attn", "task"}, Kind::kString);
    c.values(a, path, {"mean", "std"}, Kind::kNumber);
  });
  c.array(r, "", "runs", [&](const json& run, const std::string& path) {
    c.values(run, path, {"label", "task"}, Kind::kString);
    c.curve(run, path);
  });
}

void check_lm(const json& r, const Checker& c) {
  c.value(r, "", "seeds", Kind::kInteger);
  const json& config = c.member(r, "", "config");
  c.values(config, "config",
           {"d_model", "layers", "heads", "mlp_width", "seq_len", "steps", "batch", "eval_windows",
            "decode_context", "decode_threads", "decode_tokens"},
           Kind::kInteger);
  c.value(config, "config", "lr", Kind::kNumber);
  c.array(r, "", "variants", [&](const json& v, const std::string& path) {
    c.values(v, path, {"label", "attn"}, Kind::kString);
    c.values(v, path, {"params", "cache_bytes_per_token"}, Kind::kInteger);
    c.value(v, path, "decode_tokens_per_s", Kind::kNumber);
  });
  c.array(r, "", "runs", [&](const json& run, const std::string& path) {
    c.value(run, path, "label", Kind::kString);
    c.value(run, path, "eval_loss", Kind::kNumber);
    c.curve(run, path);
  });
}

void check_vision(const json& r, const Checker& c) {
  c.value(r, "", "seeds", Kind::kInteger);
  const json& config = c.member(r, "", "config");
  c.values(config, "config", {"d_model", "layers", "heads", "steps", "batch", "eval_examples"},
           Kind::kInteger);
  c.value(config, "config", "lr", Kind::kNumber);
  c.array(r, "", "variants", [&](const json& v, const std::string& path) {
    c.value(v, path, "label", Kind::kString);
    c.values(v, path, {"params_vit", "params_set"}, Kind::kInteger);
  });
  c.array(r, "", "runs", [&](const json& run, const std::string& path) {
    c.values(run, path, {"label", "task"}, Kind::kString);
    c.value(run, path, "accuracy", Kind::kNumber);
    c.curve(run, path);
  });
}

void check_convert(const json& r, const Checker& c) {
  c.value(r, "", "seeds", Kind::kInteger);
  const json& config = c.member(r, "", "config");
  c.values(config, "config",
           {"d_model", "layers", "heads", "mlp_width", "seq_len", "steps", "batch", "eval_windows",
            "uptrain_steps", "calibration_tokens"},
           Kind::kInteger);
  c.values(config, "config", {"lr", "uptrain_lr", "kd_alpha", "kd_temperature"}, Kind::kNumber);
  c.array(
      r, "", "pairs",
      [&](const json& p, const std::string& path) {
        c.values(p, path, {"teacher", "target", "label"}, Kind::kString);
        c.values(p, path, {"cache_bytes_per_token", "teacher_cache_bytes_per_token"},
                 Kind::kInteger);
        c.array(p, path, "converted", [&](const json& cv, const std::string& at) {
          c.value(cv, at, "seed", Kind::kInteger);
          c.values(cv, at, {"eval_loss", "map_error", "output_error"}, Kind::kNumber);
        });
      },
      /*non_empty=*/true);
  c.array(r, "", "runs", [&](const json& run, const std::string& path) {
    c.value(run, path, "label", Kind::kString);
    c.value(run, path, "eval_loss", Kind::kNumber);
    c.curve(run, path);
  });
}

void check_serve(const json& r, const Checker& c) {
  // a --url run knows neither the server's machine nor where its time goes: those are null
  const json& config = c.member(r, "", "config");
  c.values(config, "config", {"prompt_len", "output_len", "requests", "budget_bytes", "page_size"},
           Kind::kInteger);
  c.values(config, "config",
           {"layers", "d_model", "heads", "max_num_seqs", "threads", "bandwidth_gb_per_s",
            "f32_peak_gmacs", "bf16_peak_gmacs"},
           Kind::kNumberOrNull);
  c.value(config, "config", "fixed_rate", Kind::kNumber);
  c.values(config, "config", {"weight_dtype", "cpu"}, Kind::kString);
  const auto latency = [&](const json& object, const std::string& path, const char* key) {
    c.values(c.member(object, path, key), path + "." + key, {"mean", "p50", "p99"}, Kind::kNumber);
  };
  c.array(
      r, "", "rows",
      [&](const json& row, const std::string& path) {
        c.values(row, path, {"label", "attn", "cache_dtype", "bound"}, Kind::kString);
        c.value(row, path, "cache_bytes_per_token", Kind::kInteger);
        c.values(row, path, {"max_concurrency", "request_throughput", "output_throughput"},
                 Kind::kNumber);
        c.values(row, path,
                 {"peak_running", "preemptions", "roofline_output_throughput", "prompt_steps_s",
                  "decode_steps_s", "decode_steps", "mean_decode_batch"},
                 Kind::kNumberOrNull);
        const json& fixed = c.member(row, path, "fixed_rate");
        latency(fixed, path + ".fixed_rate", "ttft_ms");
        latency(fixed, path + ".fixed_rate", "tpot_ms");
        c.value(fixed, path + ".fixed_rate", "preemptions", Kind::kNumberOrNull);
      },
      /*non_empty=*/true);
  c.array(r, "", "loads", [&](const json& load, const std::string& path) {
    c.value(load, path, "label", Kind::kString);
    c.values(load, path, {"offered_rate", "request_throughput", "output_throughput"},
             Kind::kNumber);
  });
}

}  // namespace

void validate_results_json(const json& results, const std::string& source) {
  const Checker c(source);
  if (!results.is_object()) c.fail("results", "must be a JSON object (a kvlab compare results)");
  c.value(results, "", "suite", Kind::kString);
  const std::string suite = results.at("suite").get<std::string>();
  if (suite == "synthetic") return check_synthetic(results, c);
  if (suite == "lm") return check_lm(results, c);
  if (suite == "vision") return check_vision(results, c);
  if (suite == "convert") return check_convert(results, c);
  if (suite == "serve") return check_serve(results, c);
  c.fail("suite", "is '" + text_excerpt(suite, 40) +
                      "', not a suite kvlab knows (synthetic, lm, "
                      "vision, convert, serve)");
}

}  // namespace kvlab
