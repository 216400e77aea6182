#include "kernels/gemm.h"

#include <oneapi/dnnl/dnnl.h>

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

}  // namespace kvlab

namespace kvlab {

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
         std::to_string(v->patch) + " sgemm (" + isa + ")";
}

}  // namespace kvlab
