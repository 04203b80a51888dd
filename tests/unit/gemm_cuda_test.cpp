// cuBLASLt products (gemm.h) against a double reference, where the algorithm choice changes: the
// first large shape of a tuning class times the candidates, shapes of the same class take its
// choice without timing, and each must still compute its own product exactly. And uploads through
// a staging buffer in parallel pieces (device.h), which the products' inputs take.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "compute/cuda/cuda.h"
#include "compute/cuda/device.h"
#include "compute/cuda/gemm.h"
#include "support/random_values.h"
#include "support/scoped_env.h"
#include "support/scratch_dir.h"

namespace hark::compute::cuda {
namespace {

using testing::uniform_values;

// y = x · wᵀ + bias + residual, the residual added in place (the case where tuning must run its
// candidates on a copy), checked against a double reference.
void expect_product_with_residual_in_place(Gemm& gemm, int64_t m, int64_t k, int64_t n,
                                           const std::vector<float>& w, const Buffer& w_dev,
                                           const std::vector<float>& bias, const Buffer& bias_dev) {
  const std::vector<float> x = uniform_values(m * k, static_cast<uint32_t>(m));
  const std::vector<float> residual = uniform_values(m * n, static_cast<uint32_t>(m + 7));
  const Buffer x_dev = upload_vector(x);
  Buffer y_dev = upload_vector(residual);
  gemm.linear(Element::f32, x_dev.data(), m, k, w_dev.data(), n, bias_dev.data(), y_dev.data(),
              Element::f32, y_dev.data(), nullptr);
  std::vector<float> y(static_cast<size_t>(m * n));
  download(y_dev.data(), y.size() * sizeof(float), y.data());
  double worst = 0;
  for (int64_t row = 0; row < m; ++row) {
    for (int64_t col = 0; col < n; ++col) {
      double sum = bias[col] + residual[row * n + col];
      for (int64_t i = 0; i < k; ++i) sum += double{x[row * k + i]} * w[col * k + i];
      worst = std::max(worst, std::abs(y[row * n + col] - sum) / (1.0 + std::abs(sum)));
    }
  }
  EXPECT_LT(worst, 1e-5) << m << " rows";
}

TEST(GemmCuda, ShapesOfOneTuningClassTakeItsChoiceAndComputeTheirOwnProduct) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  constexpr int64_t k = 96, n = 160;
  const std::vector<float> w = uniform_values(n * k, 1), bias = uniform_values(n, 2);
  const Buffer w_dev = upload_vector(w), bias_dev = upload_vector(bias);
  Gemm gemm;
  // 4096 rows tunes (class 4096: quarter octaves, 512 rows apart between 2048 and 4096); 3700 and
  // 3585 share its class and take its choice, 4097 starts the next class, 3584 is of the class
  // below. Each is checked against its own reference, the residual added in place.
  for (const int64_t m : {4096, 3700, 3585, 4097, 3584}) {
    expect_product_with_residual_in_place(gemm, m, k, n, w, w_dev, bias, bias_dev);
  }
}

// A choice timed by one Gemm is kept in the tuning cache's file; a Gemm that reads the file
// afresh (as the next process does) takes it without timing, for its shape and the others of its
// class, and computes their products right.
TEST(GemmCuda, TheNextProcessTakesTunedChoicesFromTheCache) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  constexpr int64_t k = 96, n = 160;
  const std::vector<float> w = uniform_values(n * k, 1), bias = uniform_values(n, 2);
  const Buffer w_dev = upload_vector(w), bias_dev = upload_vector(bias);
  test::ScratchDir dir;
  const std::string first_file = dir.file("first.tune"), second_file = dir.file("second.tune");
  {
    testing::ScopedEnv cache("HARK_CUDA_TUNING_CACHE", first_file.c_str());
    Gemm gemm;
    expect_product_with_residual_in_place(gemm, 4096, k, n, w, w_dev, bias, bias_dev);
    EXPECT_EQ(gemm.timed_shapes(), 1);
  }
  std::filesystem::copy_file(first_file, second_file);
  testing::ScopedEnv cache("HARK_CUDA_TUNING_CACHE", second_file.c_str());
  Gemm gemm;
  for (const int64_t m : {4096, 3700}) {
    expect_product_with_residual_in_place(gemm, m, k, n, w, w_dev, bias, bias_dev);
  }
  EXPECT_EQ(gemm.timed_shapes(), 0);
  // A shape of another class is timed, and added to the file.
  expect_product_with_residual_in_place(gemm, 2000, k, n, w, w_dev, bias, bias_dev);
  EXPECT_EQ(gemm.timed_shapes(), 1);
  EXPECT_GT(std::filesystem::file_size(second_file), std::filesystem::file_size(first_file));
}

// A product too large to time whole: its candidates are timed on its first 4096 rows
// (gemm_cuda.cpp, kTimedFlops), and the choice must compute every row, those past the timed ones
// included. F32 sums of 4096 products round to a few 1e-5 of their scale (4.2e-5 on an H200); a row
// the chosen algorithm left out or computed wrong would be off by about 1.
TEST(GemmCuda, ALargeProductTunedOnItsFirstRowsComputesAllOfThem) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  constexpr int64_t m = 5000, k = 4096, n = 16384;
  const std::vector<float> w = uniform_values(n * k, 3), bias = uniform_values(n, 4);
  const std::vector<float> x = uniform_values(m * k, 5);
  const Buffer w_dev = upload_vector(w), bias_dev = upload_vector(bias), x_dev = upload_vector(x);
  Buffer y_dev(sizeof(float) * m * n);
  Gemm gemm;
  gemm.linear(Element::f32, x_dev.data(), m, k, w_dev.data(), n, bias_dev.data(), nullptr,
              Element::f32, y_dev.data(), nullptr);
  std::vector<float> y(static_cast<size_t>(m * n));
  download(y_dev.data(), y.size() * sizeof(float), y.data());
  double worst = 0;
  for (const int64_t row :
       {int64_t{0}, int64_t{1}, int64_t{4095}, int64_t{4096}, int64_t{4200}, int64_t{4999}}) {
    for (int64_t col = 0; col < n; col += 7) {
      double sum = bias[col];
      for (int64_t i = 0; i < k; ++i) sum += double{x[row * k + i]} * w[col * k + i];
      worst = std::max(worst, std::abs(y[row * n + col] - sum) / (1.0 + std::abs(sum)));
    }
  }
  EXPECT_LT(worst, 2e-4);
}

// Sizes below one piece, of several pieces with a partial last one, and a refill of the same
// staging buffer while the first upload's copies may still run.
TEST(StagingBufferCuda, UploadFromCopiesEveryPieceToItsPlace) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  StagingBuffer staging;
  for (const size_t count : {size_t{3}, size_t{1} << 20, (size_t{5} << 18) + 7}) {
    const std::vector<float> host = uniform_values(count, static_cast<uint32_t>(count));
    Buffer device(count * sizeof(float));
    staging.upload_from(host.data(), count * sizeof(float), device.data(), nullptr);
    std::vector<float> back(count);
    download(device.data(), count * sizeof(float), back.data());
    ASSERT_EQ(back, host) << count << " values";
  }
}

}  // namespace
}  // namespace hark::compute::cuda
