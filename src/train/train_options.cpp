#include "train/train_options.h"

#include <cmath>

#include "nn/linear_function.h"
#include "spec/spec_error.h"

namespace kvlab::train {

using nlohmann::json;

void TrainOptions::validate() const {
  auto positive = [](const char* field, int64_t v) {
    if (v <= 0) throw SpecError(field, "must be > 0, got " + std::to_string(v));
  };
  positive("steps", steps);
  positive("batch", batch);
  positive("accumulation", accumulation);
  positive("eval_batch", eval_batch);
  if (batch % accumulation != 0) {
    throw SpecError("accumulation", "batch " + std::to_string(batch) + " does not split into " +
                                        std::to_string(accumulation) + " equal micro-batches");
  }
  // written so that NaN fails every test
  if (!(lr > 0) || !std::isfinite(lr)) throw SpecError("lr", "must be a finite number > 0");
  if (!(lr_floor >= 0 && lr_floor <= 1)) throw SpecError("lr_floor", "must be in [0, 1]");
  if (warmup < 0) throw SpecError("warmup", "must be >= 0");
  if (!(weight_decay >= 0) || !std::isfinite(weight_decay)) {
    throw SpecError("weight_decay", "must be a finite number >= 0");
  }
  if (!(beta1 >= 0 && beta1 < 1)) throw SpecError("beta1", "must be in [0, 1)");
  if (!(beta2 >= 0 && beta2 < 1)) throw SpecError("beta2", "must be in [0, 1)");
  if (!(clip >= 0) || !std::isfinite(clip)) {
    throw SpecError("clip", "must be a finite number >= 0 (0 disables clipping)");
  }
  if (threads < 0) throw SpecError("threads", "must be >= 0 (0: all cores)");
  if (eval_every < 0) throw SpecError("eval_every", "must be >= 0");
  if (checkpoint_every < 0) throw SpecError("checkpoint_every", "must be >= 0");
  nn::parse_matmul_precision(matmul_precision);  // a name it knows, on a CPU that has it
  if (!(kd_alpha >= 0 && kd_alpha <= 1)) throw SpecError("kd_alpha", "must be in [0, 1]");
  if (!(kd_temperature > 0) || !std::isfinite(kd_temperature)) {
    throw SpecError("kd_temperature", "must be a finite number > 0");
  }
  if (distill_from.empty() && (kd_alpha != 0.5 || kd_temperature != 2.0)) {
    throw SpecError("kd_alpha", "applies to distillation: give the teacher (distill_from)");
  }
}

json TrainOptions::to_json() const {
  json doc = {{"steps", steps},
              {"batch", batch},
              {"accumulation", accumulation},
              {"lr", lr},
              {"lr_floor", lr_floor},
              {"warmup", warmup},
              {"weight_decay", weight_decay},
              {"beta1", beta1},
              {"beta2", beta2},
              {"clip", clip},
              {"eval_every", eval_every},
              {"checkpoint_every", checkpoint_every},
              {"eval_batch", eval_batch},
              {"seed", seed},
              {"threads", threads},
              {"matmul_precision", matmul_precision}};
  if (!init_from.empty()) doc["init_from"] = init_from;
  if (!distill_from.empty()) {
    doc["distill_from"] = distill_from;
    doc["kd_alpha"] = kd_alpha;
    doc["kd_temperature"] = kd_temperature;
  }
  return doc;
}

TrainOptions TrainOptions::from_json(const json& doc) {
  TrainOptions o;
  try {
    o.steps = doc.at("steps").get<int64_t>();
    o.batch = doc.at("batch").get<int64_t>();
    o.accumulation = doc.at("accumulation").get<int64_t>();
    o.lr = doc.at("lr").get<double>();
    o.lr_floor = doc.at("lr_floor").get<double>();
    o.warmup = doc.at("warmup").get<int64_t>();
    o.weight_decay = doc.at("weight_decay").get<double>();
    o.beta1 = doc.at("beta1").get<double>();
    o.beta2 = doc.at("beta2").get<double>();
    o.clip = doc.at("clip").get<double>();
    o.eval_every = doc.at("eval_every").get<int64_t>();
    o.checkpoint_every = doc.at("checkpoint_every").get<int64_t>();
    o.eval_batch = doc.at("eval_batch").get<int64_t>();
    o.seed = doc.at("seed").get<uint64_t>();
    o.threads = doc.value("threads", 0);  // runs written before the field: all cores
    o.matmul_precision = doc.value("matmul_precision", std::string("f32"));
    o.init_from = doc.value("init_from", std::string());
    o.distill_from = doc.value("distill_from", std::string());
    o.kd_alpha = doc.value("kd_alpha", 0.5);
    o.kd_temperature = doc.value("kd_temperature", 2.0);
  } catch (const json::exception& e) {
    throw SpecError("train", std::string("malformed training options: ") + e.what());
  }
  o.validate();
  return o;
}

}  // namespace kvlab::train
