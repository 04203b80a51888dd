#include "compute/cuda/gemm.h"

#include <string>

#include "base/error.h"

namespace hark::compute::cuda {

namespace {

constexpr size_t kWorkspaceBytes = 32u << 20;  // what cuBLASLt's Hopper kernels like to have

void check_blas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    fail("cuBLASLt: ", what, ": ", cublasLtGetStatusString(status));
  }
}

cudaDataType_t data_type(Element e) {
  switch (e) {
    case Element::f32:
      return CUDA_R_32F;
    case Element::f16:
      return CUDA_R_16F;
    case Element::bf16:
      return CUDA_R_16BF;
  }
  return CUDA_R_32F;
}

}  // namespace

// One shape's descriptors and algorithm. Row-major y[m, n] = x·wᵀ is column-major
// yᵀ[n, m] = w[k, n]ᵀ · xᵀ[k, m]: A = w transposed, B = x as it is, C = residual, D = y.
struct Gemm::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool with_bias = false;

  ~Plan() {
    if (op) cublasLtMatmulDescDestroy(op);
    for (cublasLtMatrixLayout_t layout : {a, b, c, d}) {
      if (layout) cublasLtMatrixLayoutDestroy(layout);
    }
  }
};

Gemm::Gemm() : workspace_(kWorkspaceBytes) {
  check_blas(cublasLtCreate(&handle_), "create");
}

Gemm::~Gemm() {
  for (auto& [key, plan] : plans_) delete plan;
  if (handle_) cublasLtDestroy(handle_);
}

Gemm::Plan& Gemm::plan(const Key& key) {
  if (auto found = plans_.find(key); found != plans_.end()) return *found->second;
  const auto [in_code, out_code, m, n, k, with_bias, with_residual] = key;
  const Element in = static_cast<Element>(in_code), out = static_cast<Element>(out_code);
  auto* plan = new Plan;
  plans_[key] = plan;
  plan->with_bias = with_bias;

  const cublasComputeType_t compute = CUBLAS_COMPUTE_32F;  // F32 accumulation, never TF32
  check_blas(cublasLtMatmulDescCreate(&plan->op, compute, CUDA_R_32F), "matmul descriptor");
  const cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &transpose,
                                 sizeof transpose);
  cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof keep);
  if (with_bias) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                   sizeof epilogue);
    const cudaDataType_t bias_type = data_type(in);
    cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                   sizeof bias_type);
  }
  check_blas(cublasLtMatrixLayoutCreate(&plan->a, data_type(in), k, n, k), "layout A");
  check_blas(cublasLtMatrixLayoutCreate(&plan->b, data_type(in), k, m, k), "layout B");
  check_blas(cublasLtMatrixLayoutCreate(&plan->c, data_type(out), n, m, n), "layout C");
  check_blas(cublasLtMatrixLayoutCreate(&plan->d, data_type(out), n, m, n), "layout D");

  cublasLtMatmulPreference_t preference = nullptr;
  check_blas(cublasLtMatmulPreferenceCreate(&preference), "preference");
  const size_t workspace = kWorkspaceBytes;
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                       &workspace, sizeof workspace);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      handle_, plan->op, plan->a, plan->b, plan->c, plan->d, preference, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(preference);
  if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
    fail("cuBLASLt has no algorithm for a ", m, " x ", n, " x ", k, " product (", with_bias,
         " bias, ", with_residual, " residual)");
  }
  plan->algo = result.algo;
  return *plan;
}

void Gemm::linear(Element in, const void* x, int64_t m, int64_t k, const void* w, int64_t n,
                  const void* bias, const void* residual, Element out, void* y,
                  cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  Plan& p = plan(Key{static_cast<int>(in), static_cast<int>(out), m, n, k, bias != nullptr,
                     residual != nullptr});
  if (bias != nullptr) {
    cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
  }
  const float alpha = 1.0f, beta = residual != nullptr ? 1.0f : 0.0f;
  const void* c = residual != nullptr ? residual : y;
  check_blas(cublasLtMatmul(handle_, p.op, &alpha, w, p.a, x, p.b, &beta, c, p.c, y, p.d, &p.algo,
                            workspace_.data(), workspace_.bytes(), stream),
             "matmul");
}

}  // namespace hark::compute::cuda
