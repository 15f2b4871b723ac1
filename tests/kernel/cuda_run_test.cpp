// Runs emitted CUDA kernels on a GPU (when one is present) and compares them with the
// reference: the warp-per-row reductions, the lane-strided columns, the single-block
// Scatter and the error slot. Without libcuda or a device the test skips: the CUDA
// check that needs no GPU is NVRTC compilation, done for every kernel elsewhere.
#include <dlfcn.h>

#include "harness.hpp"

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

#define CU_OK(call) ASSERT_EQ((call), 0) << #call

class GpuBatch {
 public:
  void add(std::string name, Region region, std::vector<DimMap> dims,
           std::function<HostTensor(size_t, DType, size_t, std::mt19937&)> data = {}) {
    cases_.push_back({std::move(name), std::move(region), std::move(dims), std::move(data)});
  }

  void run() {
    Driver& cu = Driver::get();
    for (const auto& c : cases_) {
      SCOPED_TRACE(c.name);
      auto k = lower(c.region);
      ASSERT_TRUE(k);
      std::string cubin = nvrtc::compile(emit_cuda(*k, "kernel"), "kernel", "sm_90");
      void* module = nullptr;
      void* fn = nullptr;
      CU_OK(cu.module_load_data(&module, cubin.data()));
      CU_OK(cu.module_get_function(&fn, module, "kernel"));
      const Graph& g = c.region.graph;
      std::mt19937 rng(7);
      for (const DimMap& dims : c.dims) {
        std::vector<HostTensor> data;
        for (NodeId in : g.inputs()) {
          const Node& n = g.node(in);
          auto numel = static_cast<size_t>(product(n.shape).eval(dims));
          data.push_back(c.data ? c.data(data.size(), n.dtype, numel, rng) : random_tensor(n.dtype, numel, rng));
        }
        ReferenceRuntime ref;
        std::vector<NodeId> ids(g.size());
        for (NodeId i = 0; i < g.size(); ++i) ids[i] = i;
        ref.load_plans({Runtime::Plan{{}, g, ids}});
        for (size_t i = 0; i < data.size(); ++i) ref.set_tensor(g.inputs()[i], data[i]);
        ref.execute(dims);
        HostTensor want = ref.get_tensor(g.outputs()[0]);

        HostTensor got = HostTensor::zeros(k->output, static_cast<size_t>(k->output_numel.eval(dims)));
        std::vector<long long> dim_values;
        for (const auto& d : k->dim_names) dim_values.push_back(dims.at(d));
        std::vector<Driver::Ptr> ptrs;
        auto upload = [&](const void* p, size_t bytes) {
          Driver::Ptr d = 0;
          EXPECT_EQ(cu.mem_alloc(&d, std::max<size_t>(bytes, 16)), 0);
          if (bytes) {
            EXPECT_EQ(cu.htod(d, p, bytes), 0);
          }
          ptrs.push_back(d);
        };
        for (auto& t : data) upload(t.bytes.data(), t.bytes.size());
        upload(got.bytes.data(), got.bytes.size());
        int32_t error = 0;
        upload(&error, sizeof error);
        upload(dim_values.data(), dim_values.size() * sizeof(long long));
        std::vector<void*> args;
        for (auto& p : ptrs) args.push_back(&p);
        auto grid = static_cast<unsigned>(k->grid_x.eval(dims));
        if (grid > 0) {
          CU_OK(cu.launch(fn, grid, 1, 1, static_cast<unsigned>(k->block_x), 1, 1, 0, nullptr, args.data(), nullptr));
          CU_OK(cu.synchronize());
        }
        size_t out_slot = data.size();
        CU_OK(cu.dtoh(got.bytes.data(), ptrs[out_slot], got.bytes.size()));
        CU_OK(cu.dtoh(&error, ptrs[out_slot + 1], sizeof error));
        for (auto p : ptrs) cu.mem_free(p);
        EXPECT_EQ(error, 0);
        EXPECT_EQ(compare(got, want), "") << to_string(*k);
      }
      cu.module_unload(module);
    }
  }

 private:
  struct Case {
    std::string name;
    Region region;
    std::vector<DimMap> dims;
    std::function<HostTensor(size_t, DType, size_t, std::mt19937&)> data;
  };
  std::vector<Case> cases_;
};

HostTensor plain(size_t, DType dt, size_t n, std::mt19937& rng) { return random_tensor(dt, n, rng, false, false); }

TEST(KernelCuda, RunsOnTheGpuAndMatchesTheReference) {
  if (!nvrtc::available() || !Driver::get().error.empty())
    GTEST_SKIP() << "no GPU: " << (nvrtc::available() ? Driver::get().error : nvrtc::load_error());
  const Expression seq = Expression::var("seq");
  const std::vector<DimMap> dims = {{{"seq", 5}}, {{"seq", 67}}};
  GpuBatch batch;
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    std::string d(dtype_name(dt));
    {
      Graph cx;
      cx.tensor({seq, 100}, dt).softmax(1).output();
      batch.add("softmax " + d, Region{cx}, dims, plain);
    }
    {
      Graph cx;
      auto x = cx.tensor({seq, 70}, dt);
      x.layer_norm(1, cx.tensor({70}, dt), cx.tensor({70}, dt)).output();
      batch.add("layer norm " + d, Region{cx}, dims, plain);
    }
    {
      Graph cx;
      auto x = cx.tensor({seq, 33}, dt);
      auto xt = cx.tensor({33, seq}, dt).permute({1, 0});
      ((x * 1.5).exp2() + xt.sin() - x.sqrt()).pad(1, 2, 1).output();
      batch.add("elementwise " + d, Region{cx}, dims);
    }
  }
  for (DType dt : kAllDTypes) {
    for (OpKind op : {OpKind::SumReduce, OpKind::MaxReduce}) {
      Graph cx;
      NodeInput x = viewed_input(cx, dt, ViewKind::Permute, seq, 45);
      NodeId r = add_op(cx, op, dt, {seq}, {x}, 1);
      add_output(cx, r);
      batch.add(std::string(op_name(op)) + " " + std::string(dtype_name(dt)), Region{cx}, dims);
    }
  }
  {
    Graph cx;
    cx.tensor({4, seq, 9}).mean({1, 2}).output();
    batch.add("mean over two axes", Region{cx}, dims, plain);
  }
  {
    Graph cx;
    auto table = cx.tensor({9, 40});
    auto ids = cx.tensor({seq, 40}, DType::I64);
    ((table.gather(0, ids) * 3.0) + 1.0).output();
    batch.add("gather", Region{cx}, dims, [](size_t input, DType t, size_t n, std::mt19937& rng) {
      if (input == 0) return random_tensor(t, n, rng);
      HostTensor h = HostTensor::zeros(t, n);
      for (size_t i = 0; i < n; ++i) h.set_i64(i, static_cast<int64_t>(rng() % 9));
      return h;
    });
  }
  {
    Graph g;
    NodeInput dest{add_input(g, DType::F32, {seq, 4}), ShapeTracker::contiguous({seq, 4})};
    NodeInput idx{add_input(g, DType::I32, {5}), ShapeTracker::contiguous({5})};
    NodeInput src{add_input(g, DType::F32, {5}), ShapeTracker::contiguous({5})};
    add_output(g, add_op(g, OpKind::Scatter, DType::F32, {seq, 4}, {dest, idx, src}));
    batch.add("scatter", Region{g}, dims, [](size_t input, DType t, size_t n, std::mt19937& rng) {
      if (input != 1) return random_tensor(t, n, rng);
      HostTensor h = HostTensor::zeros(t, n);
      for (size_t i = 0; i < n; ++i) h.set_i64(i, static_cast<int64_t>(i * 3 + 2));
      return h;
    });
  }
  batch.run();
}

}  // namespace
}  // namespace luminal::kernel::testing
