// What every test process runs under, set before any test (and inherited by the hark processes
// the end-to-end tests start): no tuning cache in the user's home. A cache written by one test
// process would hand its cuBLASLt choices, timed on other shapes of a class, to the next one, and
// tests that compare two runs (a batch against one file alone) would then depend on which tests
// ran before. The cache's own tests name their files. An explicit setting is kept.
#include <cstdlib>

namespace {

[[maybe_unused]] const bool kNoTuningCache = [] {
  ::setenv("HARK_CUDA_TUNING_CACHE", "off", /*overwrite=*/0);
  return true;
}();

}  // namespace
