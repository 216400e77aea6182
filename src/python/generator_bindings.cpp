#include <set>
#include <string>
#include <vector>

#include "cli/text_generator.h"
#include "experiments/eval_decode.h"
#include "infer/generator.h"
#include "kernels/attn_precision.h"
#include "nn/checkpoint.h"
#include "nn/threads.h"
#include "python/bindings.h"
#include "spec/memory_budget.h"
#include "spec/spec_error.h"

namespace py = pybind11;

namespace kvlab::python {
namespace {

// The decode runtime for callers that write their own loops: sequences, prompts and batched
// steps, each call checked so that a wrong id or token is a Python exception, not a read
// outside the cache.
class DecodeSession {
 public:
  DecodeSession(const std::string& checkpoint, const std::string& cache_dtype,
                const std::string& weight_dtype, int64_t max_tokens, int64_t max_seqs, int threads,
                const std::string& precision)
      : max_seqs_(max_seqs) {
    if (max_tokens < 1) throw SpecError("max_tokens", "must be >= 1");
    if (max_seqs < 1) throw SpecError("max_seqs", "must be >= 1");
    const DType dtype = parse_dtype(cache_dtype, "cache_dtype");
    const DType weights = parse_weight_dtype_flag(weight_dtype);
    nn::TransformerModel model = nn::load_model(nn::checkpoint_dir(checkpoint));
    require_memory("max_tokens", "a cache of max_seqs × max_tokens tokens",
                   [&] { return model->config().cache_bytes(max_tokens, max_seqs); });
    generator_.emplace(model, dtype, max_tokens, max_seqs, nn::set_threads(threads), std::nullopt,
                       std::nullopt, 0, weights);
    // as generate's --attn-precision (kvlab generate, the serving engine)
    infer::DecodeModel& decode = generator_->decode_model();
    decode.set_attn_precision(
        resolve_decode_attn_precision(precision, decode.supports_bf16_precision(), dtype));
  }

  int32_t add_sequence() {
    if (static_cast<int64_t>(live_.size()) >= max_seqs_) {
      throw SpecError("max_seqs", "all " + std::to_string(max_seqs_) + " sequences are in use");
    }
    const int32_t seq = generator_->add_sequence();
    live_.insert(seq);
    return seq;
  }
  void free_sequence(int32_t seq) {
    check_live(seq);
    generator_->free_sequence(seq);
    live_.erase(seq);
  }
  int64_t length(int32_t seq) const {
    check_live(seq);
    return generator_->length(seq);
  }
  torch::Tensor feed(int32_t seq, const std::vector<int64_t>& tokens) {
    check_live(seq);
    check_tokens(tokens);
    py::gil_scoped_release release;
    return generator_->feed(seq, tokens);
  }
  torch::Tensor step(const std::vector<int32_t>& seqs, const std::vector<int64_t>& tokens) {
    if (seqs.size() != tokens.size()) {
      throw SpecError("tokens", std::to_string(tokens.size()) + " tokens for " +
                                    std::to_string(seqs.size()) + " sequences (one each)");
    }
    if (seqs.empty()) throw SpecError("seqs", "must not be empty");
    std::set<int32_t> seen;
    for (const int32_t seq : seqs) {
      check_live(seq);
      if (!seen.insert(seq).second) {
        throw SpecError("seqs", "sequence " + std::to_string(seq) + " appears twice");
      }
      if (generator_->length(seq) == 0) {
        throw SpecError(
            "seqs", "sequence " + std::to_string(seq) + " has no tokens: feed() its prompt first");
      }
    }
    check_tokens(tokens);
    py::gil_scoped_release release;
    return generator_->step(seqs, tokens);  // [n, V]
  }
  int64_t vocab_size() const { return generator_->vocab_size(); }
  std::string precision() const {
    return attn_precision_name(generator_->decode_model().attn_precision());
  }

 private:
  void check_live(int32_t seq) const {
    if (live_.count(seq) == 0) {
      throw SpecError("seq", std::to_string(seq) + " is not a live sequence (add_sequence())");
    }
  }
  void check_tokens(const std::vector<int64_t>& tokens) const {
    if (tokens.empty()) throw SpecError("tokens", "must not be empty");
    for (const int64_t token : tokens) {
      if (token < 0 || token >= generator_->vocab_size()) {
        throw SpecError("tokens", "token " + std::to_string(token) +
                                      " is outside the vocabulary of " +
                                      std::to_string(generator_->vocab_size()));
      }
    }
  }

  int64_t max_seqs_;
  std::optional<infer::Generator> generator_;
  std::set<int32_t> live_;
};

GenerateOptions load_options(const std::string& checkpoint, const std::string& cache_dtype,
                             const std::string& weight_dtype, const std::string& rope_dtype,
                             const std::string& precision, bool use_cache, int threads) {
  GenerateOptions o;
  o.checkpoint = checkpoint;
  o.cache_dtype = cache_dtype;
  o.weight_dtype = weight_dtype;
  o.rope_dtype = rope_dtype;
  o.precision = precision;
  o.no_cache = !use_cache;
  o.threads = threads;
  return o;
}

}  // namespace

void bind_generator(py::module_& m) {
  py::class_<TextGenerator>(m, "TextGenerator",
                            "kvlab generate's model, tokenizer and decode settings, loaded once")
      .def(py::init([](const std::string& checkpoint, const std::string& cache_dtype,
                       const std::string& weight_dtype, const std::string& rope_dtype,
                       const std::string& precision, bool use_cache, int threads) {
             return std::make_unique<TextGenerator>(load_options(
                 checkpoint, cache_dtype, weight_dtype, rope_dtype, precision, use_cache, threads));
           }),
           py::arg("checkpoint"), py::arg("cache_dtype"), py::arg("weight_dtype"),
           py::arg("rope_dtype"), py::arg("precision"), py::arg("use_cache"), py::arg("threads"))
      .def(
          "generate",
          [](const TextGenerator& generator, const std::string& prompt, int64_t max_tokens,
             double temperature, int64_t top_k, double top_p, uint64_t seed) {
            GenerateOptions o;
            o.prompt = prompt;
            o.max_tokens = max_tokens;
            o.temperature = temperature;
            o.top_k = top_k;
            o.top_p = top_p;
            o.seed = seed;
            TextGenerator::Result result;
            {
              py::gil_scoped_release release;
              result = generator.generate(o, {});
            }
            // bytes, not str: a byte model's text need not be UTF-8
            return py::make_tuple(py::bytes(result.text), result.run.tokens);
          },
          py::arg("prompt"), py::arg("max_tokens"), py::arg("temperature"), py::arg("top_k"),
          py::arg("top_p"), py::arg("seed"))
      .def("encode", &TextGenerator::encode, py::arg("text"))
      .def(
          "decode",
          [](const TextGenerator& generator, const std::vector<int32_t>& ids) {
            return py::bytes(generator.decode(ids));
          },
          py::arg("ids"))
      .def_property_readonly("weight_dtype", [](const TextGenerator& generator) {
        return std::string(dtype_name(generator.weight_dtype()));
      });

  py::class_<DecodeSession>(m, "DecodeSession",
                            "The decode runtime's paged cache and batched steps (infer::Generator)")
      .def(py::init<const std::string&, const std::string&, const std::string&, int64_t, int64_t,
                    int, const std::string&>(),
           py::arg("checkpoint"), py::arg("cache_dtype"), py::arg("weight_dtype"),
           py::arg("max_tokens"), py::arg("max_seqs"), py::arg("threads"),
           py::arg("precision") = "f32")
      .def("add_sequence", &DecodeSession::add_sequence)
      .def("free_sequence", &DecodeSession::free_sequence, py::arg("seq"))
      .def("length", &DecodeSession::length, py::arg("seq"))
      .def("feed", &DecodeSession::feed, py::arg("seq"), py::arg("tokens"))
      .def("step", &DecodeSession::step, py::arg("seqs"), py::arg("tokens"))
      .def_property_readonly("vocab_size", &DecodeSession::vocab_size)
      .def_property_readonly("precision", &DecodeSession::precision);
}

}  // namespace kvlab::python
