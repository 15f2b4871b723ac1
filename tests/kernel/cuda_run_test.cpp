// Runs the emitted CUDA kernels of cuda_cases.hpp on a GPU (when one is present) and
// compares them with the reference. Without libcuda or a device the test skips; NVRTC
// compilation of every kernel (no GPU needed) is checked in ops_test/fused_test, and the
// CUDA execution model is emulated on the CPU in cuda_emulated_test.
#include <dlfcn.h>

#include "cuda_cases.hpp"

namespace luminal::kernel::testing {
namespace {

// The few CUDA driver API entry points used here, loaded at run time.
struct Driver {
  using Ptr = unsigned long long;
  int (*init)(unsigned) = nullptr;
  int (*device_get)(int*, int) = nullptr;
  int (*primary_ctx_retain)(void**, int) = nullptr;
  int (*ctx_set_current)(void*) = nullptr;
  int (*module_load_data)(void**, const void*) = nullptr;
  int (*module_unload)(void*) = nullptr;
  int (*module_get_function)(void**, void*, const char*) = nullptr;
  int (*mem_alloc)(Ptr*, size_t) = nullptr;
  int (*mem_free)(Ptr) = nullptr;
  int (*htod)(Ptr, const void*, size_t) = nullptr;
  int (*dtoh)(void*, Ptr, size_t) = nullptr;
  int (*launch)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**, void**) = nullptr;
  int (*synchronize)() = nullptr;
  std::string error;

  static Driver& get() {
    static Driver d = [] {
      Driver d;
      void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
      if (!lib) {
        d.error = "no libcuda.so.1";
        return d;
      }
      auto sym = [&](auto& fn, const char* name) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
        if (!fn && d.error.empty()) d.error = std::string("libcuda lacks ") + name;
      };
      sym(d.init, "cuInit");
      sym(d.device_get, "cuDeviceGet");
      sym(d.primary_ctx_retain, "cuDevicePrimaryCtxRetain");
      sym(d.ctx_set_current, "cuCtxSetCurrent");
      sym(d.module_load_data, "cuModuleLoadData");
      sym(d.module_unload, "cuModuleUnload");
      sym(d.module_get_function, "cuModuleGetFunction");
      sym(d.mem_alloc, "cuMemAlloc_v2");
      sym(d.mem_free, "cuMemFree_v2");
      sym(d.htod, "cuMemcpyHtoD_v2");
      sym(d.dtoh, "cuMemcpyDtoH_v2");
      sym(d.launch, "cuLaunchKernel");
      sym(d.synchronize, "cuCtxSynchronize");
      if (!d.error.empty()) return d;
      int dev = 0;
      void* ctx = nullptr;
      if (d.init(0) != 0 || d.device_get(&dev, 0) != 0 || d.primary_ctx_retain(&ctx, dev) != 0 || d.ctx_set_current(ctx) != 0)
        d.error = "no usable CUDA device";
      return d;
    }();
    return d;
  }
};

TEST(KernelCuda, RunsOnTheGpuAndMatchesTheReference) {
  if (!nvrtc::available() || !Driver::get().error.empty())
    GTEST_SKIP() << "no GPU: " << (nvrtc::available() ? Driver::get().error : nvrtc::load_error());
  Driver& cu = Driver::get();
  run_cuda_cases([&](const Kernel& k, const std::string& source, std::vector<std::pair<void*, size_t>>& buffers,
                     std::vector<long long>& dims) {
    std::string cubin = nvrtc::compile(source, "lm_kernel", "sm_90");
    void* module = nullptr;
    void* fn = nullptr;
    ASSERT_EQ(cu.module_load_data(&module, cubin.data()), 0);
    ASSERT_EQ(cu.module_get_function(&fn, module, "lm_kernel"), 0);
    std::vector<Driver::Ptr> ptrs, allocations;
    // Each device pointer as far past a 16-byte boundary as its host buffer (run_cuda_cases
    // shifts them), so that vectorized kernels take their scalar loop here too.
    auto upload = [&](const void* p, size_t bytes) {
      Driver::Ptr base = 0;
      EXPECT_EQ(cu.mem_alloc(&base, std::max<size_t>(bytes, 16) + 16), 0);
      allocations.push_back(base);
      const Driver::Ptr d = base + (reinterpret_cast<uintptr_t>(p) & 15);
      if (bytes) {
        EXPECT_EQ(cu.htod(d, p, bytes), 0);
      }
      ptrs.push_back(d);
    };
    for (auto& [p, bytes] : buffers) upload(p, bytes);
    upload(dims.data(), dims.size() * sizeof(long long));
    std::vector<void*> args;
    for (auto& p : ptrs) args.push_back(&p);
    DimMap dm;
    for (size_t i = 0; i < k.dim_names.size(); ++i) dm[k.dim_names[i]] = dims[i];
    auto grid = static_cast<unsigned>(k.grid_x.eval(dm));
    if (grid > 0) {
      EXPECT_EQ(cu.launch(fn, grid, 1, 1, static_cast<unsigned>(k.block_x), 1, 1, 0, nullptr, args.data(), nullptr), 0);
      EXPECT_EQ(cu.synchronize(), 0);
    }
    for (size_t i = k.output_slot(); i < buffers.size(); ++i) EXPECT_EQ(cu.dtoh(buffers[i].first, ptrs[i], buffers[i].second), 0);
    for (auto p : allocations) cu.mem_free(p);
    cu.module_unload(module);
  });
}

}  // namespace
}  // namespace luminal::kernel::testing
