// Loading the CUDA libraries at run time: dlopen, then one dlsym per table row.
#include "luminal_cuda/api.hpp"

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "luminal/error.hpp"

namespace luminal::cuda::api {
namespace {

// Candidate paths for a library, in order: LD_LIBRARY_PATH's folders (the user's explicit
// choice), the toolkit's folders, then the plain soname (ld.so.cache, or a copy already in
// the process). The toolkit comes before the plain soname because the kernels compile
// against its headers (include_options), while inside a PyTorch process the soname
// resolves to the NVRTC that torch's wheel loaded at import, possibly another version.
std::vector<std::string> candidates(const char* soname) {
  std::vector<std::string> paths;
  if (const char* dirs = std::getenv("LD_LIBRARY_PATH"); dirs && *dirs) {
    std::string_view rest = dirs;
    while (!rest.empty()) {
      const size_t colon = rest.find(':');
      const std::string dir(rest.substr(0, colon));
      rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
      if (!dir.empty()) paths.push_back(dir + "/" + soname);
    }
  }
  for (const char* var : {"CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"}) {
    if (const char* root = std::getenv(var); root && *root) {
      paths.push_back(std::string(root) + "/lib64/" + soname);
      paths.push_back(std::string(root) + "/lib/" + soname);
    }
  }
  paths.push_back(std::string("/usr/local/cuda/lib64/") + soname);
  paths.push_back(std::string("/usr/local/cuda/lib/") + soname);
  paths.push_back(soname);
  return paths;
}

// `sonames` lists alternatives separated by '|', preferred first; the error names the first.
void* open_library(const char* sonames, std::string& error) {
  std::string first_error;
  std::string_view rest = sonames;
  while (!rest.empty()) {
    const size_t bar = rest.find('|');
    const std::string soname(rest.substr(0, bar));
    rest = bar == std::string_view::npos ? std::string_view() : rest.substr(bar + 1);
    for (const std::string& path : candidates(soname.c_str())) {
      if (void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
      // The error to report: the plain soname's (the loader's own search), else the first.
      const char* why = dlerror();
      if (first_error.empty() || path == soname) first_error = why ? why : "unknown dlopen error";
    }
  }
  const std::string_view all = sonames;
  error = std::string(all.substr(0, all.find('|'))) + " not found (" + first_error + ")";
  return nullptr;
}

// `symbols` lists alternatives separated by '|', newest first ("cuX_v2|cuX"); a leading
// '?' makes the symbol optional (missing: the slot stays null, no error).
template <class Fn>
void load_symbol(void* handle, const char* symbols, Fn*& slot, std::string& error) {
  std::string_view rest = symbols;
  const bool optional = !rest.empty() && rest.front() == '?';
  if (optional) rest.remove_prefix(1);
  while (!slot && !rest.empty()) {
    const size_t bar = rest.find('|');
    const std::string name(rest.substr(0, bar));
    slot = reinterpret_cast<Fn*>(dlsym(handle, name.c_str()));
    rest = bar == std::string_view::npos ? std::string_view() : rest.substr(bar + 1);
  }
  if (!slot && !optional && error.empty()) error = std::string("symbol ") + symbols + " missing";
}

#define LUMINAL_CUDA_LOAD(name, symbol, signature) load_symbol(handle, symbol, table.name, table.error);

DriverTable load_driver() {
  DriverTable table;
  void* handle = open_library("libcuda.so.1", table.error);
  if (!handle) {
    table.error = "no CUDA driver (" + table.error + ")";
    return table;
  }
  LUMINAL_CUDA_DRIVER_FUNCTIONS(LUMINAL_CUDA_LOAD)
  if (!table.error.empty()) table.error = "CUDA driver too old: " + table.error;
  return table;
}

NvrtcTable load_nvrtc() {
  NvrtcTable table;
  // NVRTC 12 also compiles for sm_90, and its CUBINs run on newer drivers.
  void* handle = open_library("libnvrtc.so.13|libnvrtc.so.12", table.error);
  if (!handle) {
    table.error = "no NVRTC (" + table.error + ")";
    return table;
  }
  LUMINAL_CUDA_NVRTC_FUNCTIONS(LUMINAL_CUDA_LOAD)
  return table;
}

CublasLtTable load_cublaslt() {
  CublasLtTable table;
  void* handle = open_library("libcublasLt.so.13", table.error);
  if (!handle) {
    table.error = "no cuBLASLt (" + table.error + ")";
    return table;
  }
  LUMINAL_CUDA_CUBLASLT_FUNCTIONS(LUMINAL_CUDA_LOAD)
  return table;
}
#undef LUMINAL_CUDA_LOAD

}  // namespace

// Function-local statics: loaded once, thread-safe, and never unloaded (a library's
// destructors running after ours would be a use-after-unload).
const DriverTable& driver_table() {
  static const DriverTable table = load_driver();
  return table;
}
const NvrtcTable& nvrtc_table() {
  static const NvrtcTable table = load_nvrtc();
  return table;
}
const CublasLtTable& cublaslt_table() {
  static const CublasLtTable table = load_cublaslt();
  return table;
}

const DriverTable& driver() {
  const DriverTable& table = driver_table();
  LUMINAL_CHECK(table.error.empty(), "CUDA backend unavailable: ", table.error);
  return table;
}
const NvrtcTable& nvrtc() {
  const NvrtcTable& table = nvrtc_table();
  LUMINAL_CHECK(table.error.empty(), "CUDA backend cannot compile kernels: ", table.error);
  return table;
}
const CublasLtTable& cublaslt() {
  const CublasLtTable& table = cublaslt_table();
  LUMINAL_CHECK(table.error.empty(), "cuBLASLt unavailable on this machine: ", table.error);
  return table;
}

namespace {
// The first context-corrupting failure of this process, once there has been one.
std::mutex lost_mutex;
std::string lost_message;
std::atomic<bool> lost{false};
}  // namespace

bool corrupts_context(CUresult result) {
  switch (result) {
    case 214:  // CUDA_ERROR_ECC_UNCORRECTABLE
    case 700:  // CUDA_ERROR_ILLEGAL_ADDRESS
    case 702:  // CUDA_ERROR_LAUNCH_TIMEOUT
    case 710:  // CUDA_ERROR_ASSERT
    case 714:  // CUDA_ERROR_HARDWARE_STACK_ERROR
    case 715:  // CUDA_ERROR_ILLEGAL_INSTRUCTION
    case 716:  // CUDA_ERROR_MISALIGNED_ADDRESS
    case 717:  // CUDA_ERROR_INVALID_ADDRESS_SPACE
    case 718:  // CUDA_ERROR_INVALID_PC
    case 719:  // CUDA_ERROR_LAUNCH_FAILED
      return true;
    default:
      return false;
  }
}

void throw_if_device_lost() {
  if (!lost.load(std::memory_order_acquire)) return;
  std::lock_guard lock(lost_mutex);
  throw DeviceLost(lost_message);
}

void check(CUresult result, const char* call) {
  if (result == CUDA_SUCCESS) return;
  throw_if_device_lost();  // a later symptom of the fault already reported
  const char* name = nullptr;
  const char* text = nullptr;
  const DriverTable& table = driver_table();
  if (table.cuGetErrorName) table.cuGetErrorName(result, &name);
  if (table.cuGetErrorString) table.cuGetErrorString(result, &text);
  std::string message = detail::concat(call, " failed: ", name ? name : "CUresult", " ", result, " (",
                                       text ? text : "no description", ")");
  if (corrupts_context(result)) {
    message += "; the CUDA context is lost: CUDA cannot recover it inside this process, so every later CUDA "
               "call fails; restart the process (a fault in a generated kernel is a luminal bug: please report it)";
    {
      std::lock_guard lock(lost_mutex);
      if (!lost.load()) lost_message = message;
      lost.store(true, std::memory_order_release);
    }
    throw DeviceLost(message);
  }
  throw Error(message);
}

void check_nvrtc(nvrtcResult result, const char* call) {
  if (result == NVRTC_SUCCESS) return;
  const NvrtcTable& table = nvrtc_table();
  const char* text = table.nvrtcGetErrorString ? table.nvrtcGetErrorString(result) : nullptr;
  fail(call, " failed: ", text ? text : "nvrtcResult", " (", result, ")");
}

void check_cublas(cublasStatus_t result, const char* call) {
  if (result == CUBLAS_STATUS_SUCCESS) return;
  const CublasLtTable& table = cublaslt_table();
  const char* name = table.cublasLtGetStatusName ? table.cublasLtGetStatusName(result) : nullptr;
  const char* text = table.cublasLtGetStatusString ? table.cublasLtGetStatusString(result) : nullptr;
  fail(call, " failed: ", name ? name : "cublasStatus_t", " ", result, " (", text ? text : "no description", ")");
}

}  // namespace luminal::cuda::api
