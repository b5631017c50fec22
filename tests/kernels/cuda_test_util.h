// tests/kernels/cuda_test_util: the one rule every CUDA test follows — without a usable device
// (no GPU, no driver, or a binary built without CUDA) it reports "skipped: no device" and
// passes as SKIPPED, never failed. Asking costs one cudaGetDeviceCount, made inside the test,
// never at static-initialisation time.
#pragma once
#include <gtest/gtest.h>

#include <string>

#ifdef SLUICE_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

namespace sluice::test {

inline bool cuda_device_present(std::string* why) {
#ifdef SLUICE_HAVE_CUDA
  return cuda_device_count(why) > 0;
#else
  *why = "this binary was built without CUDA";
  return false;
#endif
}

}  // namespace sluice::test

#define SLUICE_REQUIRE_CUDA()                                        \
  do {                                                               \
    std::string why_no_cuda_;                                        \
    if (!::sluice::test::cuda_device_present(&why_no_cuda_))         \
      GTEST_SKIP() << "skipped: no device (" << why_no_cuda_ << ")"; \
  } while (0)
