#include "kernels/gemm.h"

#include <oneapi/dnnl/dnnl.h>

#include <oneapi/dnnl/dnnl.hpp>
#include <stdexcept>
#include <string>

namespace kvlab {

void sgemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
           int64_t ldc) {
  const dnnl_status_t status = dnnl_sgemm(transpose_a ? 'T' : 'N', transpose_b ? 'T' : 'N', m, n, k,
                                          alpha, a, lda, b, ldb, beta, c, ldc);
  if (status != dnnl_success) {
    throw std::runtime_error("sgemm: oneDNN refused m " + std::to_string(m) + ", n " +
                             std::to_string(n) + ", k " + std::to_string(k) + " (status " +
                             std::to_string(static_cast<int>(status)) + ")");
  }
}

void gemm_bf16(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
               const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c,
               int64_t ldc) {
  if (beta != 0.0f && beta != 1.0f) {
    throw std::runtime_error("gemm_bf16: beta must be 0 or 1, not " + std::to_string(beta));
  }
  using dnnl::memory;
  try {
    const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    // op(A) [m, k] and op(B) [k, n] as strides over the row-major arrays
    const memory::desc a_desc({m, k}, memory::data_type::bf16,
                              transpose_a ? memory::dims{1, lda} : memory::dims{lda, 1});
    const memory::desc b_desc({k, n}, memory::data_type::bf16,
                              transpose_b ? memory::dims{1, ldb} : memory::dims{ldb, 1});
    const memory::desc c_desc({m, n}, memory::data_type::f32, memory::dims{ldc, 1});
    dnnl::primitive_attr attr;
    if (beta == 1.0f) {
      dnnl::post_ops accumulate;
      accumulate.append_sum(1.0f);
      attr.set_post_ops(accumulate);
    }
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_desc, b_desc, c_desc), attr, engine);
    dnnl::stream stream(engine);
    dnnl::matmul(pd).execute(stream,
                             {{DNNL_ARG_SRC, memory(a_desc, engine, const_cast<uint16_t*>(a))},
                              {DNNL_ARG_WEIGHTS, memory(b_desc, engine, const_cast<uint16_t*>(b))},
                              {DNNL_ARG_DST, memory(c_desc, engine, c)}});
    stream.wait();
  } catch (const dnnl::error& e) {
    throw std::runtime_error("gemm_bf16: oneDNN refused m " + std::to_string(m) + ", n " +
                             std::to_string(n) + ", k " + std::to_string(k) + ": " + e.what());
  }
}

bool bf16_gemm_native() {
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  return isa == dnnl_cpu_isa_avx512_core_bf16 || isa == dnnl_cpu_isa_avx512_core_amx;
}

std::string gemm_description() {
  const char* isa = "an ISA newer than this build knows";
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_all:
      isa = "all";
      break;
    case dnnl_cpu_isa_sse41:
      isa = "sse41";
      break;
    case dnnl_cpu_isa_avx:
      isa = "avx";
      break;
    case dnnl_cpu_isa_avx2:
      isa = "avx2";
      break;
    case dnnl_cpu_isa_avx512_mic:
      isa = "avx512_mic";
      break;
    case dnnl_cpu_isa_avx512_mic_4ops:
      isa = "avx512_mic_4ops";
      break;
    case dnnl_cpu_isa_avx512_core:
      isa = "avx512_core";
      break;
    case dnnl_cpu_isa_avx512_core_vnni:
      isa = "avx512_core_vnni";
      break;
    case dnnl_cpu_isa_avx512_core_bf16:
      isa = "avx512_core_bf16";
      break;
    case dnnl_cpu_isa_avx512_core_amx:
      isa = "avx512_core_amx";
      break;
    case dnnl_cpu_isa_avx2_vnni:
      isa = "avx2_vnni";
      break;
  }
  const dnnl_version_t* v = dnnl_version();
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
         std::to_string(v->patch) + " (" + isa + ")";
}

}  // namespace kvlab
