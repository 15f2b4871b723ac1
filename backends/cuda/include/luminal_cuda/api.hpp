// The few CUDA driver, NVRTC and cuBLASLt declarations this backend uses, declared here
// so that nothing links against (or even needs the headers of) the CUDA toolkit. The
// libraries are opened with dlopen at run time; api_abi_test.cpp checks every value and
// layout below against the toolkit headers wherever they are installed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

namespace luminal::cuda::api {

// ---- driver API (libcuda.so.1) ----
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;
using CUgraph = struct CUgraph_st*;
using CUgraphExec = struct CUgraphExec_st*;
using CUgraphNode = struct CUgraphNode_st*;
// What cuGraphExecUpdate says about an update it refused (CUgraphExecUpdateResultInfo).
struct CUgraphExecUpdateResultInfo {
  int result = 0;  // CUgraphExecUpdateResult
  CUgraphNode errorNode = nullptr;
  CUgraphNode errorFromNode = nullptr;
};

// cuLaunchKernelEx's configuration (cuda.h: CUlaunchConfig, CUlaunchAttribute), with the
// one attribute this backend sets.
struct CUlaunchAttribute {
  int id = 0;  // CUlaunchAttributeID
  char pad[4] = {};
  union {
    char bytes[64];
    int programmaticStreamSerializationAllowed;
  } value = {};
};
struct CUlaunchConfig {
  unsigned gridDimX = 1, gridDimY = 1, gridDimZ = 1;
  unsigned blockDimX = 1, blockDimY = 1, blockDimZ = 1;
  unsigned sharedMemBytes = 0;
  CUstream hStream = nullptr;
  CUlaunchAttribute* attrs = nullptr;
  unsigned numAttrs = 0;
};
inline constexpr int CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6;
static_assert(sizeof(CUlaunchAttribute) == 72 && offsetof(CUlaunchAttribute, value) == 8, "cuda.h's CUlaunchAttribute");
static_assert(sizeof(CUlaunchConfig) == 56 && offsetof(CUlaunchConfig, hStream) == 32 &&
                  offsetof(CUlaunchConfig, attrs) == 40 && offsetof(CUlaunchConfig, numAttrs) == 48,
              "cuda.h's CUlaunchConfig");

inline constexpr CUresult CUDA_SUCCESS = 0;
inline constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;
inline constexpr CUresult CUDA_ERROR_NOT_SUPPORTED = 801;
inline constexpr CUresult CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE = 910;
inline constexpr int CU_GRAPH_EXEC_UPDATE_SUCCESS = 0;
inline constexpr int CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED = 2;
inline constexpr int CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED = 8;
inline constexpr int CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
inline constexpr int CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38;
inline constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
inline constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
inline constexpr int CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97;
inline constexpr int CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;
inline constexpr unsigned CU_STREAM_NON_BLOCKING = 1;
inline constexpr unsigned CU_EVENT_DEFAULT = 0;
inline constexpr int CU_STREAM_CAPTURE_MODE_RELAXED = 2;

// X-macro: name in the table, symbol looked up with dlsym (alternatives separated by
// '|', newest first), signature. One row per call. A leading '?' marks an optional
// symbol: when missing, its slot stays null and the library still loads (callers check).
#define LUMINAL_CUDA_DRIVER_FUNCTIONS(X)                                                        \
  X(cuInit, "cuInit", CUresult(unsigned))                                                       \
  X(cuDriverGetVersion, "cuDriverGetVersion", CUresult(int*))                                  \
  X(cuGetErrorName, "cuGetErrorName", CUresult(CUresult, const char**))                         \
  X(cuGetErrorString, "cuGetErrorString", CUresult(CUresult, const char**))                     \
  X(cuDeviceGetCount, "cuDeviceGetCount", CUresult(int*))                                       \
  X(cuDeviceGet, "cuDeviceGet", CUresult(CUdevice*, int))                                       \
  X(cuDeviceGetName, "cuDeviceGetName", CUresult(char*, int, CUdevice))                        \
  X(cuDeviceGetAttribute, "cuDeviceGetAttribute", CUresult(int*, int, CUdevice))               \
  X(cuDeviceTotalMem, "cuDeviceTotalMem_v2", CUresult(size_t*, CUdevice))                      \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", CUresult(CUcontext*, CUdevice))      \
  X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", CUresult(CUdevice))             \
  X(cuCtxSetCurrent, "cuCtxSetCurrent", CUresult(CUcontext))                                    \
  X(cuCtxSynchronize, "cuCtxSynchronize", CUresult())                                           \
  X(cuMemGetInfo, "cuMemGetInfo_v2", CUresult(size_t*, size_t*))                               \
  X(cuMemAlloc, "cuMemAlloc_v2", CUresult(CUdeviceptr*, size_t))                               \
  X(cuMemFree, "cuMemFree_v2", CUresult(CUdeviceptr))                                           \
  X(cuMemAllocHost, "cuMemAllocHost_v2", CUresult(void**, size_t))                             \
  X(cuMemFreeHost, "cuMemFreeHost", CUresult(void*))                                             \
  X(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", CUresult(CUdeviceptr, const void*, size_t, CUstream)) \
  X(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", CUresult(void*, CUdeviceptr, size_t, CUstream)) \
  X(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", CUresult(CUdeviceptr, CUdeviceptr, size_t, CUstream)) \
  X(cuMemsetD8Async, "cuMemsetD8Async", CUresult(CUdeviceptr, unsigned char, size_t, CUstream)) \
  X(cuStreamCreate, "cuStreamCreate", CUresult(CUstream*, unsigned))                            \
  X(cuStreamDestroy, "cuStreamDestroy_v2", CUresult(CUstream))                                  \
  X(cuStreamSynchronize, "cuStreamSynchronize", CUresult(CUstream))                             \
  X(cuEventCreate, "cuEventCreate", CUresult(CUevent*, unsigned))                               \
  X(cuEventDestroy, "cuEventDestroy_v2", CUresult(CUevent))                                     \
  X(cuEventRecord, "cuEventRecord", CUresult(CUevent, CUstream))                                \
  X(cuEventSynchronize, "cuEventSynchronize", CUresult(CUevent))                                \
  X(cuEventElapsedTime, "cuEventElapsedTime_v2|cuEventElapsedTime", CUresult(float*, CUevent, CUevent))           \
  X(cuModuleLoadData, "cuModuleLoadData", CUresult(CUmodule*, const void*))                     \
  X(cuModuleUnload, "cuModuleUnload", CUresult(CUmodule))                                       \
  X(cuModuleGetFunction, "cuModuleGetFunction", CUresult(CUfunction*, CUmodule, const char*))  \
  X(cuFuncSetAttribute, "cuFuncSetAttribute", CUresult(CUfunction, int, int))                   \
  X(cuLaunchKernel, "cuLaunchKernel",                                                           \
    CUresult(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,  \
             CUstream, void**, void**))                                                         \
  X(cuLaunchKernelEx, "?cuLaunchKernelEx", CUresult(const CUlaunchConfig*, CUfunction, void**, void**)) \
  X(cuStreamBeginCapture, "cuStreamBeginCapture_v2", CUresult(CUstream, int))                  \
  X(cuStreamEndCapture, "cuStreamEndCapture", CUresult(CUstream, CUgraph*))                     \
  X(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags",                                 \
    CUresult(CUgraphExec*, CUgraph, unsigned long long))                                        \
  X(cuGraphLaunch, "cuGraphLaunch", CUresult(CUgraphExec, CUstream))                            \
  X(cuGraphExecDestroy, "cuGraphExecDestroy", CUresult(CUgraphExec))                            \
  X(cuGraphDestroy, "cuGraphDestroy", CUresult(CUgraph))                                       \
  X(cuGraphExecUpdate, "?cuGraphExecUpdate_v2",                                                 \
    CUresult(CUgraphExec, CUgraph, CUgraphExecUpdateResultInfo*))

// ---- NVRTC (libnvrtc.so.13) ----
using nvrtcResult = int;
using nvrtcProgram = struct _nvrtcProgram*;
inline constexpr nvrtcResult NVRTC_SUCCESS = 0;

#define LUMINAL_CUDA_NVRTC_FUNCTIONS(X)                                                          \
  X(nvrtcVersion, "nvrtcVersion", nvrtcResult(int*, int*))                                       \
  X(nvrtcGetErrorString, "nvrtcGetErrorString", const char*(nvrtcResult))                       \
  X(nvrtcCreateProgram, "nvrtcCreateProgram",                                                    \
    nvrtcResult(nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*)) \
  X(nvrtcDestroyProgram, "nvrtcDestroyProgram", nvrtcResult(nvrtcProgram*))                     \
  X(nvrtcCompileProgram, "nvrtcCompileProgram", nvrtcResult(nvrtcProgram, int, const char* const*)) \
  X(nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize", nvrtcResult(nvrtcProgram, size_t*))        \
  X(nvrtcGetProgramLog, "nvrtcGetProgramLog", nvrtcResult(nvrtcProgram, char*))                  \
  X(nvrtcGetCUBINSize, "nvrtcGetCUBINSize", nvrtcResult(nvrtcProgram, size_t*))                  \
  X(nvrtcGetCUBIN, "nvrtcGetCUBIN", nvrtcResult(nvrtcProgram, char*))

// ---- cuBLASLt (libcublasLt.so.13) ----
using cublasStatus_t = int;
using cublasLtHandle_t = struct cublasLtContext*;
struct cublasLtMatmulDescOpaque_t { uint64_t data[32]; };
struct cublasLtMatrixLayoutOpaque_t { uint64_t data[8]; };
struct cublasLtMatmulPreferenceOpaque_t { uint64_t data[8]; };
using cublasLtMatmulDesc_t = cublasLtMatmulDescOpaque_t*;
using cublasLtMatrixLayout_t = cublasLtMatrixLayoutOpaque_t*;
using cublasLtMatmulPreference_t = cublasLtMatmulPreferenceOpaque_t*;
struct cublasLtMatmulAlgo_t { uint64_t data[8]; };
struct cublasLtMatmulHeuristicResult_t {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
};

inline constexpr cublasStatus_t CUBLAS_STATUS_SUCCESS = 0;
inline constexpr int CUDA_R_32F = 0;
inline constexpr int CUDA_R_16F = 2;
inline constexpr int CUDA_R_16BF = 14;
inline constexpr int CUBLAS_COMPUTE_32F = 68;
inline constexpr int CUBLAS_COMPUTE_32F_FAST_TF32 = 77;
inline constexpr int CUBLAS_OP_N = 0;
inline constexpr int CUBLAS_OP_T = 1;
inline constexpr int CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5;
inline constexpr int CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6;
inline constexpr int CUBLASLT_MATMUL_DESC_TRANSA = 3;
inline constexpr int CUBLASLT_MATMUL_DESC_TRANSB = 4;
inline constexpr int CUBLASLT_MATMUL_DESC_EPILOGUE = 7;
inline constexpr int CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8;
inline constexpr int CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE = 10;
inline constexpr int CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26;
inline constexpr int CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1;
inline constexpr uint32_t CUBLASLT_EPILOGUE_DEFAULT = 1;
inline constexpr uint32_t CUBLASLT_EPILOGUE_RELU = 2;
inline constexpr uint32_t CUBLASLT_EPILOGUE_BIAS = 4;
inline constexpr uint32_t CUBLASLT_EPILOGUE_RELU_BIAS = 6;
inline constexpr uint32_t CUBLASLT_EPILOGUE_GELU = 32;
inline constexpr uint32_t CUBLASLT_EPILOGUE_GELU_BIAS = 36;

#define LUMINAL_CUDA_CUBLASLT_FUNCTIONS(X)                                                       \
  X(cublasLtGetVersion, "cublasLtGetVersion", size_t())                                          \
  X(cublasLtGetStatusName, "cublasLtGetStatusName", const char*(cublasStatus_t))               \
  X(cublasLtGetStatusString, "cublasLtGetStatusString", const char*(cublasStatus_t))           \
  X(cublasLtCreate, "cublasLtCreate", cublasStatus_t(cublasLtHandle_t*))                        \
  X(cublasLtDestroy, "cublasLtDestroy", cublasStatus_t(cublasLtHandle_t))                       \
  X(cublasLtMatmulDescCreate, "cublasLtMatmulDescCreate", cublasStatus_t(cublasLtMatmulDesc_t*, int, int)) \
  X(cublasLtMatmulDescDestroy, "cublasLtMatmulDescDestroy", cublasStatus_t(cublasLtMatmulDesc_t)) \
  X(cublasLtMatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute",                           \
    cublasStatus_t(cublasLtMatmulDesc_t, int, const void*, size_t))                             \
  X(cublasLtMatrixLayoutCreate, "cublasLtMatrixLayoutCreate",                                   \
    cublasStatus_t(cublasLtMatrixLayout_t*, int, uint64_t, uint64_t, int64_t))                  \
  X(cublasLtMatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy", cublasStatus_t(cublasLtMatrixLayout_t)) \
  X(cublasLtMatrixLayoutSetAttribute, "cublasLtMatrixLayoutSetAttribute",                       \
    cublasStatus_t(cublasLtMatrixLayout_t, int, const void*, size_t))                           \
  X(cublasLtMatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate",                           \
    cublasStatus_t(cublasLtMatmulPreference_t*))                                                \
  X(cublasLtMatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy",                         \
    cublasStatus_t(cublasLtMatmulPreference_t))                                                 \
  X(cublasLtMatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute",               \
    cublasStatus_t(cublasLtMatmulPreference_t, int, const void*, size_t))                       \
  X(cublasLtMatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic",                           \
    cublasStatus_t(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t,              \
                   cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,      \
                   cublasLtMatmulPreference_t, int, cublasLtMatmulHeuristicResult_t*, int*))   \
  X(cublasLtMatmul, "cublasLtMatmul",                                                           \
    cublasStatus_t(cublasLtHandle_t, cublasLtMatmulDesc_t, const void*, const void*,            \
                   cublasLtMatrixLayout_t, const void*, cublasLtMatrixLayout_t, const void*,    \
                   const void*, cublasLtMatrixLayout_t, void*, cublasLtMatrixLayout_t,          \
                   const cublasLtMatmulAlgo_t*, void*, size_t, CUstream))

#define LUMINAL_CUDA_TABLE_MEMBER(name, symbol, signature) std::add_pointer_t<signature> name = nullptr;

// A function table is filled once per process; `error` is empty when every symbol loaded.
struct DriverTable {
  LUMINAL_CUDA_DRIVER_FUNCTIONS(LUMINAL_CUDA_TABLE_MEMBER)
  std::string error;
};
struct NvrtcTable {
  LUMINAL_CUDA_NVRTC_FUNCTIONS(LUMINAL_CUDA_TABLE_MEMBER)
  std::string error;
};
struct CublasLtTable {
  LUMINAL_CUDA_CUBLASLT_FUNCTIONS(LUMINAL_CUDA_TABLE_MEMBER)
  std::string error;
};
#undef LUMINAL_CUDA_TABLE_MEMBER

// The tables, loaded on first use (thread-safe). They never throw: a missing library or
// symbol leaves `error` set ("libnvrtc.so.13 not found: ..."), and the checked accessors
// below turn that into a luminal::Error.
const DriverTable& driver_table();
const NvrtcTable& nvrtc_table();
const CublasLtTable& cublaslt_table();

// Checked accessors: throw luminal::Error naming the library when it could not be loaded.
const DriverTable& driver();
const NvrtcTable& nvrtc();
const CublasLtTable& cublaslt();

// Throw luminal::Error("<call> failed: <name> (<description>)") unless the call succeeded.
// A status that means the context is corrupted (a kernel faulted: illegal address or
// instruction, misaligned access, launch failure, device assert, timeout) throws
// luminal::DeviceLost and is remembered: from then on every failing call, and
// throw_if_device_lost(), throws DeviceLost naming that first fault.
void check(CUresult result, const char* call);
// Whether `result` is one of the statuses that corrupt the context.
bool corrupts_context(CUresult result);
void throw_if_device_lost();
void check_nvrtc(nvrtcResult result, const char* call);
void check_cublas(cublasStatus_t result, const char* call);

}  // namespace luminal::cuda::api

// Call a driver function through the table and check its result, naming the call:
// LUMINAL_CU(cuMemAlloc, &ptr, bytes).
#define LUMINAL_CU(fn, ...) ::luminal::cuda::api::check(::luminal::cuda::api::driver().fn(__VA_ARGS__), #fn)
#define LUMINAL_NVRTC(fn, ...) \
  ::luminal::cuda::api::check_nvrtc(::luminal::cuda::api::nvrtc().fn(__VA_ARGS__), #fn)
#define LUMINAL_CUBLASLT(fn, ...) \
  ::luminal::cuda::api::check_cublas(::luminal::cuda::api::cublaslt().fn(__VA_ARGS__), #fn)
