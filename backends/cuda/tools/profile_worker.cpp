// luminal-cuda-profile-worker: runs the compile's candidate programs on the GPU in a
// process of its own (luminal/profiling_worker.hpp), so that a candidate that faults the
// device ends this process, not the compile. Started by the compile, never by hand.
#include "luminal/profiling_worker.hpp"
#include "luminal_cuda/cuda_runtime.hpp"

int main() {
  return luminal::serve_profiling([] { return std::make_unique<luminal::cuda::CudaRuntime>(); });
}
