// Loading without a GPU: the backend reports itself unavailable with a clear message,
// and every entry point that needs a device throws luminal::Error instead of crashing.
#include <gtest/gtest.h>

#include "luminal/error.hpp"
#include "luminal_cuda/api.hpp"
#include "luminal_cuda/device.hpp"

using namespace luminal::cuda;

TEST(CudaLoader, AvailabilityIsConsistentWithTheDriver) {
  const Availability& status = available();
  EXPECT_FALSE(status.message.empty());
  const api::DriverTable& driver = api::driver_table();
  if (!driver.error.empty()) {
    EXPECT_FALSE(status.ok);
    EXPECT_NE(status.message.find("no CUDA driver"), std::string::npos) << status.message;
    EXPECT_NE(status.message.find("libcuda.so.1"), std::string::npos) << status.message;
  }
  // Asking twice gives the same answer (it is probed once).
  EXPECT_EQ(&available(), &status);
  std::printf("CUDA availability: %s: %s\n", status.ok ? "available" : "unavailable", status.message.c_str());
}

TEST(CudaLoader, DeviceEntryPointsThrowWhenUnavailable) {
  if (available().ok) GTEST_SKIP() << "a GPU is present; this checks the no-GPU path";
  try {
    Context context;
    FAIL() << "Context construction should throw without a GPU";
  } catch (const luminal::Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA backend unavailable"), std::string::npos) << e.what();
  }
  if (!api::driver_table().error.empty()) {
    EXPECT_THROW(DeviceBuffer(1024), luminal::Error);
    EXPECT_THROW(Stream(), luminal::Error);
  }
}

TEST(CudaLoader, ErrorsNameTheCall) {
  if (!api::driver_table().error.empty()) {
    // Without a driver the error names the library instead.
    try {
      api::driver();
      FAIL();
    } catch (const luminal::Error& e) {
      EXPECT_NE(std::string(e.what()).find("libcuda.so.1"), std::string::npos) << e.what();
    }
    return;
  }
  try {
    api::check(2 /* CUDA_ERROR_OUT_OF_MEMORY */, "cuMemAlloc");
    FAIL();
  } catch (const luminal::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuMemAlloc failed"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos) << e.what();
  }
}

TEST(CudaLoader, NvrtcAndCublasErrorsNameTheCall) {
  if (api::nvrtc_table().error.empty()) {
    try {
      api::check_nvrtc(6 /* NVRTC_ERROR_COMPILATION */, "nvrtcCompileProgram");
      FAIL();
    } catch (const luminal::Error& e) {
      EXPECT_NE(std::string(e.what()).find("nvrtcCompileProgram failed"), std::string::npos) << e.what();
    }
  }
  if (api::cublaslt_table().error.empty()) {
    try {
      api::check_cublas(7 /* CUBLAS_STATUS_INVALID_VALUE */, "cublasLtMatmul");
      FAIL();
    } catch (const luminal::Error& e) {
      EXPECT_NE(std::string(e.what()).find("cublasLtMatmul failed"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("CUBLAS_STATUS_INVALID_VALUE"), std::string::npos) << e.what();
    }
  }
}
