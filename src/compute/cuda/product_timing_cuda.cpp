// `hark bench --products` (cuda.h): the feed-forward products of the benchmark models with their
// activation, timed three ways on the current GPU.
#include <cstdio>
#include <string>

#include "compute/cuda/cuda.h"
#include "compute/cuda/device.h"
#include "compute/cuda/gemm.h"
#include "compute/cuda/gemm_sm90.h"
#include "compute/cuda/kernels.h"
#include "compute/cuda/kernels_conformer.h"

namespace hark::compute::cuda {

namespace {

struct Product {
  const char* what;
  int64_t m, k, n;
  Activation act;
};

// The first product of a feed-forward module, over the rows of a benchmark batch; Whisper's at
// the batches where the choice between the two ways changes (pass_cuda.cpp:
// kEpilogueActivationRows).
constexpr Product kProducts[] = {
    {"parakeet 0.6b/1.1b fc1, 64 x 20 s", 64 * 250, 1024, 4096, Activation::silu},
    {"whisper large-v3 encoder fc1, 1 window", 1500, 1280, 5120, Activation::gelu},
    {"whisper large-v3 encoder fc1, 2 windows", 2 * 1500, 1280, 5120, Activation::gelu},
    {"whisper large-v3 encoder fc1, 4 windows", 4 * 1500, 1280, 5120, Activation::gelu},
    {"whisper large-v3 encoder fc1, 8 windows", 8 * 1500, 1280, 5120, Activation::gelu},
    {"whisper large-v3 encoder fc1, 16 windows", 16 * 1500, 1280, 5120, Activation::gelu},
};

constexpr int kWarmUps = 3;
constexpr int kRuns = 20;

// Microseconds per call of f, the mean of kRuns after kWarmUps, on the default stream.
template <class F>
double time_us(F&& f) {
  for (int i = 0; i < kWarmUps; ++i) f();
  cudaEvent_t start = nullptr, stop = nullptr;
  check(cudaEventCreate(&start), "product timing");
  check(cudaEventCreate(&stop), "product timing");
  check(cudaEventRecord(start), "product timing");
  for (int i = 0; i < kRuns; ++i) f();
  check(cudaEventRecord(stop), "product timing");
  check(cudaEventSynchronize(stop), "product timing");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start, stop), "product timing");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return 1000.0 * ms / kRuns;
}

}  // namespace

std::string time_activation_products() {
  require_device();
  std::string table =
      "product (bf16, bias)                          m x k x n            cuBLASLt   + activation"
      "   one kernel\n";
  for (const Product& p : kProducts) {
    constexpr Element e = Element::bf16;
    Buffer x(element_size(e) * p.m * p.k), w(element_size(e) * p.n * p.k);
    Buffer bias(element_size(e) * p.n), y(element_size(e) * p.m * p.n);
    // Values near 0.01 (0x2424 in bf16): finite sums whatever the shape.
    for (Buffer* b : {&x, &w, &bias}) check(cudaMemset(b->data(), 0x24, b->bytes()), "fill");
    Gemm gemm;
    const double product = time_us([&] {
      gemm.linear(e, x.data(), p.m, p.k, w.data(), p.n, bias.data(), nullptr, e, y.data(), nullptr);
    });
    const double separate = time_us([&] {
      gemm.linear(e, x.data(), p.m, p.k, w.data(), p.n, bias.data(), nullptr, e, y.data(), nullptr);
      if (p.act == Activation::gelu) {
        bias_gelu(e, y.data(), nullptr, p.m, p.n, nullptr);
      } else {
        silu(e, y.data(), p.m * p.n, nullptr);
      }
    });
    std::string fused = "not here";
    if (activation_linear_runs(e, p.m, p.k, p.n, x.data(), w.data(), bias.data(), y.data())) {
      char text[32];
      std::snprintf(text, sizeof text, "%.1f us", time_us([&] {
                      activation_linear(e, x.data(), p.m, p.k, w.data(), p.n, bias.data(), p.act,
                                        y.data(), nullptr);
                    }));
      fused = text;
    }
    char line[256];
    std::snprintf(line, sizeof line, "%-44s %5ld x %4ld x %4ld  %7.1f us  %9.1f us  %11s\n", p.what,
                  static_cast<long>(p.m), static_cast<long>(p.k), static_cast<long>(p.n), product,
                  separate, fused.c_str());
    table += line;
  }
  return table;
}

}  // namespace hark::compute::cuda
