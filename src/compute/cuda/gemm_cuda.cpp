#include "compute/cuda/gemm.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "base/error.h"

namespace hark::compute::cuda {

namespace {

constexpr size_t kWorkspaceBytes = 32u << 20;  // what cuBLASLt's Hopper kernels like to have

// Products of at least this many rows are tuned on first use: the heuristic's
// candidates are timed and the fastest kept. Its first choice is often not the fastest on large
// products (they are most of an encoder's time); small ones (decode steps, whose shapes vary
// with the batch) keep the first choice and cost no tuning.
constexpr int64_t kTunedRows = 1024;
// Up to 32 of the heuristic's candidates: against 8, a Parakeet batch's encoder gained about
// 1 % (its feed-forward's second product), for about 20 ms of timing per shape class, once.
constexpr int kCandidates = 32;
constexpr int kTimedRuns = 3;
// A large product's candidates are timed on its first rows only, as many as make about this many
// flops (at least kMinTimedRows): the ranking is that of many waves of tiles either way, and
// 32 candidates run 4 times each on all the rows of a large batch took seconds (large-v3's
// cross-attention K/V product for 120 windows is 38 TFLOP, 50 ms a run).
constexpr double kTimedFlops = 5e11;
constexpr int64_t kMinTimedRows = 4096;
// The largest scratch output tuning allocates (for products whose output is also their input).
constexpr size_t kMaxTuningScratchBytes = size_t{256} << 20;

// HARK_CUDA_GEMM_TUNE=0 keeps the heuristic's first choice everywhere; =full times every
// candidate on all the rows of the product, however large (to compare).
const char* tuning_setting() {
  static const char* const value = std::getenv("HARK_CUDA_GEMM_TUNE");
  return value != nullptr ? value : "";
}
bool tuning_enabled() {
  return std::string(tuning_setting()) != "0";
}
bool tuning_on_all_rows() {
  return std::string(tuning_setting()) == "full";
}

// The tuning cache of this process's GPU and cuBLASLt version, shared by every Gemm that uses the
// same file (null when there is nowhere to keep one). Its file is named after what its choices
// are valid for: the device's name and compute capability and cuBLASLt's version.
std::shared_ptr<TuningCache> shared_tuning_cache() {
  int device = 0;
  cudaDeviceProp properties{};
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaGetDeviceProperties(&properties, device), "cudaGetDeviceProperties");
  std::string name = "cublaslt-";
  for (const char* c = properties.name; *c != '\0'; ++c) {
    name.push_back(std::isalnum(static_cast<unsigned char>(*c)) ? *c : '-');
  }
  name += "-sm" + std::to_string(properties.major) + std::to_string(properties.minor) + "-v" +
          std::to_string(cublasLtGetVersion()) + ".tune";
  const auto file = TuningCache::location("HARK_CUDA_TUNING_CACHE", name);
  if (!file) return nullptr;
  static std::mutex mutex;
  static std::map<std::filesystem::path, std::weak_ptr<TuningCache>> open;
  std::lock_guard lock(mutex);
  std::shared_ptr<TuningCache> cache = open[*file].lock();
  if (!cache) {
    cache = std::make_shared<TuningCache>(*file);
    open[*file] = cache;
  }
  return cache;
}

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
  // The heuristic's candidates, best guess first, until tune() has timed them.
  std::vector<cublasLtMatmulAlgo_t> candidates;
  size_t output_bytes = 0;  // of D, for tune()'s scratch output
  Shape tuning_class;       // where tune() files its choice

  ~Plan() {
    if (op) cublasLtMatmulDescDestroy(op);
    for (cublasLtMatrixLayout_t layout : {a, b, c, d}) {
      if (layout) cublasLtMatrixLayoutDestroy(layout);
    }
  }
};

Gemm::Gemm() : workspace_(kWorkspaceBytes) {
  check_blas(cublasLtCreate(&handle_), "create");
  // HARK_CUDA_GEMM_TUNE=full is for comparisons: it times everything afresh.
  if (tuning_enabled() && !tuning_on_all_rows()) cache_ = shared_tuning_cache();
}

Gemm::~Gemm() {
  for (auto& [key, plan] : plans_) delete plan;
  if (handle_) cublasLtDestroy(handle_);
}

Gemm::Shape Gemm::Shape::tuning_class() const {
  // The fastest algorithm changes slowly with the rows: 16,000 rows and 15,000 pick alike.
  Shape shape = *this;
  int64_t octave = 1;
  while (octave * 2 <= m) octave *= 2;
  const int64_t step = std::max<int64_t>(octave / 4, 1);
  shape.m = (m + step - 1) / step * step;
  return shape;
}

std::string Gemm::Shape::cache_key() const {
  return "in" + std::to_string(in) + "-out" + std::to_string(out) + "-m" + std::to_string(m) +
         "-n" + std::to_string(n) + "-k" + std::to_string(k) + "-bias" + std::to_string(bias) +
         "-residual" + std::to_string(residual);
}

Gemm::Plan& Gemm::plan(const Shape& shape) {
  if (auto found = plans_.find(shape); found != plans_.end()) return *found->second;
  const Element in = static_cast<Element>(shape.in), out = static_cast<Element>(shape.out);
  const int64_t m = shape.m, n = shape.n, k = shape.k;
  const bool with_bias = shape.bias, with_residual = shape.residual;
  auto* plan = new Plan;
  plans_[shape] = plan;
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
  // Column-major views of the row-major matrices: leading dimensions are the widths.
  auto layout = [&](cublasLtMatrixLayout_t& target, Element e, int64_t rows, int64_t cols,
                    const char* what) {
    check_blas(cublasLtMatrixLayoutCreate(&target, data_type(e), rows, cols, rows), what);
  };
  layout(plan->a, in, k, n, "layout A");
  layout(plan->b, in, k, m, "layout B");
  layout(plan->c, out, n, m, "layout C");
  layout(plan->d, out, n, m, "layout D");

  cublasLtMatmulPreference_t preference = nullptr;
  check_blas(cublasLtMatmulPreferenceCreate(&preference), "preference");
  const size_t workspace = kWorkspaceBytes;
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                       &workspace, sizeof workspace);
  const bool tuned = tuning_enabled() && m >= kTunedRows;
  cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
  int found = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(handle_, plan->op, plan->a, plan->b, plan->c, plan->d,
                                     preference, tuned ? kCandidates : 1, results, &found);
  cublasLtMatmulPreferenceDestroy(preference);
  if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
    fail("cuBLASLt has no algorithm for a ", m, " x ", n, " x ", k, " product (", with_bias,
         " bias, ", with_residual, " residual)");
  }
  plan->algo = results[0].algo;
  plan->tuning_class = shape.tuning_class();
  // A shape of a class tuned before takes that choice, if it can run this shape.
  if (found > 1) {
    if (auto known = tuned_.find(plan->tuning_class); known != tuned_.end()) {
      cublasLtMatmulHeuristicResult_t check{};
      if (cublasLtMatmulAlgoCheck(handle_, plan->op, plan->a, plan->b, plan->c, plan->d,
                                  &known->second->algo, &check) == CUBLAS_STATUS_SUCCESS &&
          check.workspaceSize <= kWorkspaceBytes) {
        plan->algo = known->second->algo;
        return *plan;
      }
    }
    // Timed by an earlier process: taken if this cuBLASLt accepts it for this shape.
    if (cache_ != nullptr) {
      const auto bytes = cache_->find(plan->tuning_class.cache_key());
      cublasLtMatmulAlgo_t cached{};
      cublasLtMatmulHeuristicResult_t check{};
      if (bytes && bytes->size() == sizeof cached) {
        std::memcpy(&cached, bytes->data(), sizeof cached);
        if (cublasLtMatmulAlgoCheck(handle_, plan->op, plan->a, plan->b, plan->c, plan->d, &cached,
                                    &check) == CUBLAS_STATUS_SUCCESS &&
            check.workspaceSize <= kWorkspaceBytes) {
          plan->algo = cached;
          tuned_.emplace(plan->tuning_class, plan);
          return *plan;
        }
      }
    }
  }
  if (found > 1) {
    for (int i = 0; i < found; ++i) plan->candidates.push_back(results[i].algo);
    plan->output_bytes = static_cast<size_t>(element_size(out)) * static_cast<size_t>(m * n);
  }
  return *plan;
}

void Gemm::tune(Plan& p, const Shape& shape, const void* x, const void* w, const void* residual,
                void* y, cudaStream_t stream) {
  if (p.candidates.empty()) return;
  // A stream being captured into a graph runs nothing now: tune on a later, eager call.
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(stream, &capturing), "gemm tuning");
  if (capturing != cudaStreamCaptureStatusNone) return;
  // The rows timed, and their layouts when they are fewer than the product's.
  const double row_flops = 2.0 * static_cast<double>(shape.n) * static_cast<double>(shape.k);
  const int64_t rows =
      tuning_on_all_rows()
          ? shape.m
          : std::min(
                shape.m,
                (std::max(kMinTimedRows, static_cast<int64_t>(kTimedFlops / row_flops)) + 255) /
                    256 * 256);
  struct Layouts {
    cublasLtMatrixLayout_t b = nullptr, c = nullptr, d = nullptr;
    ~Layouts() {
      for (cublasLtMatrixLayout_t layout : {b, c, d}) {
        if (layout) cublasLtMatrixLayoutDestroy(layout);
      }
    }
  } fewer;
  cublasLtMatrixLayout_t b = p.b, c_layout = p.c, d = p.d;
  if (rows < shape.m) {
    const cudaDataType_t in = data_type(static_cast<Element>(shape.in));
    const cudaDataType_t out_type = data_type(static_cast<Element>(shape.out));
    check_blas(cublasLtMatrixLayoutCreate(&fewer.b, in, shape.k, rows, shape.k), "layout B");
    check_blas(cublasLtMatrixLayoutCreate(&fewer.c, out_type, shape.n, rows, shape.n), "layout C");
    check_blas(cublasLtMatrixLayoutCreate(&fewer.d, out_type, shape.n, rows, shape.n), "layout D");
    b = fewer.b, c_layout = fewer.c, d = fewer.d;
  }
  const size_t output_bytes = p.output_bytes / static_cast<size_t>(shape.m) * rows;
  // The candidates run the real product, residual included (a kernel that reads C costs more
  // than one that does not), into y, which the real product overwrites next; unless y is also
  // the residual (added in place), when they add to a scratch copy of it instead, if one that
  // large is reasonable to allocate for a moment. Adding again and again to the copy changes
  // its values, not the time.
  Buffer scratch;
  void* out = y;
  const void* c = residual != nullptr ? residual : y;
  if (residual == y) {
    if (output_bytes > kMaxTuningScratchBytes) {
      p.candidates.clear();
      return;
    }
    scratch = Buffer(output_bytes);
    check(cudaMemcpyAsync(scratch.data(), y, output_bytes, cudaMemcpyDeviceToDevice, stream),
          "gemm tuning");
    out = scratch.data();
    c = out;
  }
  cudaEvent_t start = nullptr, stop = nullptr;
  check(cudaEventCreate(&start), "gemm tuning");
  check(cudaEventCreate(&stop), "gemm tuning");
  const float alpha = 1.0f, beta = residual != nullptr ? 1.0f : 0.0f;
  float best = 0.0f;
  bool timed = false;  // p.algo stays the first choice unless a candidate ran
  for (size_t i = 0; i < p.candidates.size(); ++i) {
    if (rows < shape.m) {  // a candidate for all the rows that cannot run on fewer
      cublasLtMatmulHeuristicResult_t fits{};
      if (cublasLtMatmulAlgoCheck(handle_, p.op, p.a, b, c_layout, d, &p.candidates[i], &fits) !=
              CUBLAS_STATUS_SUCCESS ||
          fits.workspaceSize > kWorkspaceBytes) {
        continue;
      }
    }
    auto run = [&] {
      return cublasLtMatmul(handle_, p.op, &alpha, w, p.a, x, b, &beta, c, c_layout, out, d,
                            &p.candidates[i], workspace_.data(), workspace_.bytes(), stream);
    };
    if (run() != CUBLAS_STATUS_SUCCESS) continue;  // a candidate that cannot run here
    check(cudaEventRecord(start, stream), "gemm tuning");
    for (int r = 0; r < kTimedRuns; ++r) run();
    check(cudaEventRecord(stop, stream), "gemm tuning");
    check(cudaEventSynchronize(stop), "gemm tuning");
    float milliseconds = 0.0f;
    check(cudaEventElapsedTime(&milliseconds, start, stop), "gemm tuning");
    if (!timed || milliseconds < best) {
      best = milliseconds;
      p.algo = p.candidates[i];
      timed = true;
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  p.candidates.clear();
  if (!timed) return;
  ++timed_shapes_;
  tuned_.emplace(p.tuning_class, &p);
  if (cache_ != nullptr) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(&p.algo);
    cache_->store(p.tuning_class.cache_key(), std::span(bytes, sizeof p.algo));
  }
}

void Gemm::linear(Element in, const void* x, int64_t m, int64_t k, const void* w, int64_t n,
                  const void* bias, const void* residual, Element out, void* y,
                  cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  Shape shape;
  shape.in = static_cast<int>(in);
  shape.out = static_cast<int>(out);
  shape.m = m, shape.n = n, shape.k = k;
  shape.bias = bias != nullptr;
  shape.residual = residual != nullptr;
  Plan& p = plan(shape);
  if (bias != nullptr) {
    cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
  }
  tune(p, shape, x, w, residual, y, stream);
  const float alpha = 1.0f, beta = residual != nullptr ? 1.0f : 0.0f;
  const void* c = residual != nullptr ? residual : y;
  check_blas(cublasLtMatmul(handle_, p.op, &alpha, w, p.a, x, p.b, &beta, c, p.c, y, p.d, &p.algo,
                            workspace_.data(), workspace_.bytes(), stream),
             "matmul");
}

}  // namespace hark::compute::cuda
