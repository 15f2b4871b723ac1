// Our own declarations of the CUDA API (api.hpp) against the toolkit headers, wherever
// the toolkit is installed at build time; and every symbol of each library that loads.
#include "luminal_cuda/api.hpp"  // first: cuda.h's #defines must not rename our members

#include <gtest/gtest.h>

#include <cstddef>

#if defined(LUMINAL_CUDA_HEADERS)
#include <cublasLt.h>
#include <cuda.h>
#include <nvrtc.h>

namespace api = luminal::cuda::api;
// Driver.
static_assert(sizeof(api::CUdeviceptr) == sizeof(::CUdeviceptr));
static_assert(sizeof(api::CUresult) == sizeof(::CUresult));
static_assert(api::CUDA_SUCCESS == ::CUDA_SUCCESS);
static_assert(api::CUDA_ERROR_NO_DEVICE == ::CUDA_ERROR_NO_DEVICE);
static_assert(api::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT == ::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
static_assert(api::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE == ::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
static_assert(api::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR == ::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
static_assert(api::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR == ::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
static_assert(api::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN ==
              ::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
static_assert(api::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES == ::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
static_assert(api::CU_STREAM_NON_BLOCKING == ::CU_STREAM_NON_BLOCKING);
static_assert(api::CU_EVENT_DEFAULT == ::CU_EVENT_DEFAULT);
static_assert(api::CU_STREAM_CAPTURE_MODE_RELAXED == ::CU_STREAM_CAPTURE_MODE_RELAXED);
static_assert(api::CUDA_ERROR_NOT_SUPPORTED == ::CUDA_ERROR_NOT_SUPPORTED);
static_assert(api::CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE == ::CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
static_assert(api::CU_GRAPH_EXEC_UPDATE_SUCCESS == ::CU_GRAPH_EXEC_UPDATE_SUCCESS);
static_assert(api::CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED == ::CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED);
static_assert(api::CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED == ::CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED);
static_assert(sizeof(api::CUgraphExecUpdateResultInfo) == sizeof(::CUgraphExecUpdateResultInfo));
static_assert(sizeof(api::CUgraphExecUpdateResultInfo::result) == sizeof(::CUgraphExecUpdateResult));
static_assert(offsetof(api::CUgraphExecUpdateResultInfo, errorNode) == offsetof(::CUgraphExecUpdateResultInfo, errorNode));
static_assert(offsetof(api::CUgraphExecUpdateResultInfo, errorFromNode) ==
              offsetof(::CUgraphExecUpdateResultInfo, errorFromNode));
// NVRTC.
static_assert(api::NVRTC_SUCCESS == ::NVRTC_SUCCESS);
// cuBLASLt.
static_assert(api::CUBLAS_STATUS_SUCCESS == ::CUBLAS_STATUS_SUCCESS);
static_assert(api::CUDA_R_32F == ::CUDA_R_32F);
static_assert(api::CUDA_R_16F == ::CUDA_R_16F);
static_assert(api::CUDA_R_16BF == ::CUDA_R_16BF);
static_assert(api::CUBLAS_COMPUTE_32F == ::CUBLAS_COMPUTE_32F);
static_assert(api::CUBLAS_COMPUTE_32F_FAST_TF32 == ::CUBLAS_COMPUTE_32F_FAST_TF32);
static_assert(api::CUBLAS_OP_N == ::CUBLAS_OP_N);
static_assert(api::CUBLAS_OP_T == ::CUBLAS_OP_T);
static_assert(api::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT == ::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT);
static_assert(api::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET == ::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET);
static_assert(api::CUBLASLT_MATMUL_DESC_TRANSA == ::CUBLASLT_MATMUL_DESC_TRANSA);
static_assert(api::CUBLASLT_MATMUL_DESC_TRANSB == ::CUBLASLT_MATMUL_DESC_TRANSB);
static_assert(api::CUBLASLT_MATMUL_DESC_EPILOGUE == ::CUBLASLT_MATMUL_DESC_EPILOGUE);
static_assert(api::CUBLASLT_MATMUL_DESC_BIAS_POINTER == ::CUBLASLT_MATMUL_DESC_BIAS_POINTER);
static_assert(api::CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE == ::CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE);
static_assert(api::CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE == ::CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE);
static_assert(api::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES == ::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES);
static_assert(api::CUBLASLT_EPILOGUE_DEFAULT == ::CUBLASLT_EPILOGUE_DEFAULT);
static_assert(api::CUBLASLT_EPILOGUE_RELU == ::CUBLASLT_EPILOGUE_RELU);
static_assert(api::CUBLASLT_EPILOGUE_BIAS == ::CUBLASLT_EPILOGUE_BIAS);
static_assert(api::CUBLASLT_EPILOGUE_RELU_BIAS == ::CUBLASLT_EPILOGUE_RELU_BIAS);
static_assert(api::CUBLASLT_EPILOGUE_GELU == ::CUBLASLT_EPILOGUE_GELU);
static_assert(api::CUBLASLT_EPILOGUE_GELU_BIAS == ::CUBLASLT_EPILOGUE_GELU_BIAS);
static_assert(sizeof(api::cublasLtMatmulAlgo_t) == sizeof(::cublasLtMatmulAlgo_t));
static_assert(sizeof(api::cublasLtMatmulHeuristicResult_t) == sizeof(::cublasLtMatmulHeuristicResult_t));
static_assert(offsetof(api::cublasLtMatmulHeuristicResult_t, workspaceSize) ==
              offsetof(::cublasLtMatmulHeuristicResult_t, workspaceSize));
static_assert(offsetof(api::cublasLtMatmulHeuristicResult_t, state) == offsetof(::cublasLtMatmulHeuristicResult_t, state));
static_assert(sizeof(api::cublasLtMatmulDescOpaque_t) == sizeof(::cublasLtMatmulDescOpaque_t));
static_assert(sizeof(api::cublasLtMatrixLayoutOpaque_t) == sizeof(::cublasLtMatrixLayoutOpaque_t));
static_assert(sizeof(api::cublasLtMatmulPreferenceOpaque_t) == sizeof(::cublasLtMatmulPreferenceOpaque_t));
#endif

TEST(CudaApi, DeclarationsWereCheckedAgainstTheToolkitHeaders) {
#if defined(LUMINAL_CUDA_HEADERS)
  SUCCEED() << "static_asserts above compiled against the toolkit headers";
#else
  GTEST_SKIP() << "skipped: no CUDA toolkit headers at build time";
#endif
}

// A library that loads must provide every symbol we look up (names like *_v2 are right).
TEST(CudaApi, LoadedLibrariesHaveEverySymbol) {
  using luminal::cuda::api::cublaslt_table;
  using luminal::cuda::api::driver_table;
  using luminal::cuda::api::nvrtc_table;
  for (const std::string* error : {&driver_table().error, &nvrtc_table().error, &cublaslt_table().error}) {
    EXPECT_EQ(error->find("symbol"), std::string::npos) << *error;
    EXPECT_EQ(error->find("too old"), std::string::npos) << *error;
  }
  if (cublaslt_table().error.empty()) {
    EXPECT_GT(cublaslt_table().cublasLtGetVersion(), 0u);
  }
  if (nvrtc_table().error.empty()) {
    int major = 0, minor = 0;
    EXPECT_EQ(nvrtc_table().nvrtcVersion(&major, &minor), luminal::cuda::api::NVRTC_SUCCESS);
    EXPECT_GE(major, 12);
  }
}
