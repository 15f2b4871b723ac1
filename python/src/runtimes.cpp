// The runtime registry. A new backend registers here (one line); Python reaches it as
// Graph.compile(runtime="name") without any other binding change.
#include "bindings.hpp"

#ifdef LUMINAL_HAVE_CPU  // set where the CPU backend is built (python/CMakeLists.txt)
#include "luminal/cpu/cpu_runtime.hpp"
#endif
#ifdef LUMINAL_HAVE_CUDA  // set where the CUDA backend is built (python/CMakeLists.txt)
#include "luminal_cuda/cuda_runtime.hpp"
#endif
#include "luminal/error.hpp"

namespace luminal::python {

std::vector<RuntimeEntry>& runtime_registry() {
  static std::vector<RuntimeEntry> entries;
  return entries;
}

const RuntimeEntry& find_runtime(const std::string& name) {
  std::string known;
  for (const auto& e : runtime_registry()) {
    if (e.name == name) return e;
    known += (known.empty() ? "" : ", ") + e.name;
  }
  fail("unknown runtime '", name, "' (available: ", known, ")");
}

void register_builtin_runtimes() {
  auto& r = runtime_registry();
  if (!r.empty()) return;
  r.push_back({"reference", "cpu", "double-precision interpreter (slow, exact; every backend is tested against it)",
               [] { return std::make_unique<ReferenceRuntime>(); }});
#ifdef LUMINAL_HAVE_CPU
  r.push_back({"cpu", "cpu", "the CPU backend: compiled fused kernels, our GEMM and OpenBLAS, one thread pool",
               [] { return std::make_unique<cpu::CpuRuntime>(); }});
#endif
#ifdef LUMINAL_HAVE_CUDA
  // Listed on every machine; compiling with it where no GPU is usable throws
  // "CUDA backend unavailable: ...".
  r.push_back({"cuda", "cuda", "the CUDA backend: NVRTC-compiled fused kernels, cuBLASLt and our GEMV, CUDA graphs",
               [] { return std::make_unique<cuda::CudaRuntime>(); }});
#endif
}

}  // namespace luminal::python
