// Shared by the kernel tests: build regions by hand, make varied data, run a batch of
// regions through lower -> emit_cpp -> host compiler and compare every result with the
// reference interpreter; every CUDA source goes through NVRTC for sm_90.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <sstream>

#include "luminal/kernel/host_compiler.hpp"
#include "luminal/kernel/kernel.hpp"
#include "luminal/kernel/nvrtc.hpp"
#include "luminal/luminal.hpp"

namespace luminal::kernel::testing {

inline NodeId add_input(Graph& g, DType dt, Shape shape) {
  Node n;
  n.op = OpKind::Input;
  n.dtype = dt;
  n.shape = std::move(shape);
  n.label = "in" + std::to_string(g.inputs().size());
  return g.add_node(std::move(n));
}

inline NodeId add_op(Graph& g, OpKind op, DType dt, Shape shape, std::vector<NodeInput> inputs, int axis = -1) {
  Node n;
  n.op = op;
  n.dtype = dt;
  n.shape = std::move(shape);
  n.inputs = std::move(inputs);
  n.axis = axis;
  return g.add_node(std::move(n));
}

inline NodeId add_output(Graph& g, NodeId x) {
  const Node& n = g.node(x);
  return add_op(g, OpKind::Output, n.dtype, n.shape, {{x, ShapeTracker::contiguous(n.shape)}});
}

// How an edge reads an input: every kind gives logical shape [rows, cols].
enum class ViewKind { Contiguous, Permute, Broadcast, Padded, Sliced, Flipped };
inline constexpr ViewKind kViewKinds[] = {ViewKind::Contiguous, ViewKind::Permute, ViewKind::Broadcast,
                                          ViewKind::Padded,     ViewKind::Sliced,  ViewKind::Flipped};
inline const char* view_name(ViewKind k) {
  const char* names[] = {"contiguous", "permute", "broadcast", "padded", "sliced", "flipped"};
  return names[static_cast<int>(k)];
}

// An input of `dt` read as [rows, cols] through a view of kind `k`.
inline NodeInput viewed_input(Graph& g, DType dt, ViewKind k, const Expression& rows, int64_t cols) {
  switch (k) {
    case ViewKind::Contiguous: return {add_input(g, dt, {rows, cols}), ShapeTracker::contiguous({rows, cols})};
    case ViewKind::Permute: {
      int axes[] = {1, 0};
      return {add_input(g, dt, {cols, rows}), ShapeTracker::contiguous({cols, rows}).permute(axes)};
    }
    case ViewKind::Broadcast: return {add_input(g, dt, {rows}), ShapeTracker::contiguous({rows}).insert_broadcast(1, cols)};
    case ViewKind::Padded: return {add_input(g, dt, {rows, cols - 2}), ShapeTracker::contiguous({rows, cols - 2}).pad(1, 1, 1)};
    case ViewKind::Sliced:
      return {add_input(g, dt, {rows, 2 * cols + 1}), ShapeTracker::contiguous({rows, 2 * cols + 1}).slice(1, 1, 2 * cols + 1, 2)};
    case ViewKind::Flipped: return {add_input(g, dt, {rows, cols}), ShapeTracker::contiguous({rows, cols}).flip(0)};
  }
  return {};
}

// Varied values: negatives, +-0, +-inf, NaN for floats; extremes for integers.
inline HostTensor random_tensor(DType dt, size_t n, std::mt19937& rng, bool nonzero = false, bool specials = true) {
  HostTensor t = HostTensor::zeros(dt, n);
  std::normal_distribution<double> normal(0.0, 3.0);
  if (is_float(dt)) {
    const double inf = std::numeric_limits<double>::infinity();
    const double special[] = {0.0, -0.0, inf, -inf, std::nan(""), 0.5, -2.25, 1e4};
    for (size_t i = 0; i < n; ++i) {
      double v = (specials && i % 5 == 3) ? special[(i / 5) % 8] : normal(rng);
      if (nonzero && v == 0) v = 1.5;
      t.set_f64(i, v);
    }
    return t;
  }
  int64_t lo = 0, hi = 1;
  switch (dt) {
    case DType::I32: lo = std::numeric_limits<int32_t>::min(), hi = std::numeric_limits<int32_t>::max(); break;
    case DType::I64: lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max(); break;
    case DType::I8: lo = -128, hi = 127; break;
    case DType::U8: lo = 0, hi = 255; break;
    default: break;
  }
  std::uniform_int_distribution<int64_t> small(-20, 20);
  for (size_t i = 0; i < n; ++i) {
    int64_t v = (specials && i % 7 == 2) ? (i % 14 == 2 ? lo : hi) : small(rng);
    if (dt == DType::Bool) v = nonzero ? 1 : (v & 1);
    if (dt == DType::U8 && v < 0) v = -v;
    if (nonzero && v == 0) v = 3;
    t.set_i64(i, v);
  }
  return t;
}

inline std::pair<double, double> tolerance(DType dt) {
  switch (dt) {
    case DType::F64: return {1e-9, 1e-9};
    case DType::F32: return {1e-5, 1e-5};
    case DType::F16: return {1e-2, 1e-2};
    case DType::BF16: return {2e-2, 2e-2};
    default: return {0, 0};
  }
}

// "" when equal within the dtype's tolerance, else a description of the first mismatch.
inline std::string compare(const HostTensor& got, const HostTensor& want) {
  if (got.numel() != want.numel() || got.dtype != want.dtype)
    return "size/dtype mismatch: " + std::to_string(got.numel()) + " vs " + std::to_string(want.numel());
  auto [atol, rtol] = tolerance(want.dtype);
  for (size_t i = 0; i < want.numel(); ++i) {
    bool ok;
    double a = got.get_f64(i), b = want.get_f64(i);
    if (!is_float(want.dtype)) ok = got.get_i64(i) == want.get_i64(i);
    else if (std::isnan(b)) ok = std::isnan(a);
    else if (std::isinf(b)) ok = a == b;
    else ok = !std::isnan(a) && std::fabs(a - b) <= atol + rtol * std::fabs(b);
    if (!ok) {
      std::ostringstream os;
      os.precision(17);
      os << "element " << i << ": got " << a << " want " << b;
      return os.str();
    }
  }
  return "";
}

// (Built with append: GCC 12 warns falsely on "literal" + std::string.)
inline std::string kernel_name(size_t i) {
  std::string s = "k";
  s.append(std::to_string(i));
  return s;
}

inline bool nvrtc_required() {
  const char* allow = std::getenv("LUMINAL_ALLOW_NO_NVRTC");
  return !(allow && std::string(allow) == "1");
}

using KernelFn = void(void* const*, const int64_t*, int64_t, int64_t);
using ExtentFn = int64_t(const int64_t*);

// A batch of regions checked together: one C++ translation unit per chunk, one NVRTC
// program for all CUDA sources.
class Batch {
 public:
  struct Case {
    std::string name;
    Region region;
    std::vector<DimMap> dims;  // each run: these dim values (the same compiled kernel)
    std::function<HostTensor(size_t input, DType, size_t numel, std::mt19937&)> data;
  };

  void add(std::string name, Region region, std::vector<DimMap> dims = {{}},
           std::function<HostTensor(size_t, DType, size_t, std::mt19937&)> data = {}) {
    cases_.push_back({std::move(name), std::move(region), std::move(dims), std::move(data)});
  }
  size_t size() const { return cases_.size(); }

  void run(HostCompiler& compiler, size_t chunks = 2) {
    std::vector<Kernel> kernels;
    std::vector<std::string> cpp(chunks), cuda_sources;
    for (size_t i = 0; i < cases_.size(); ++i) {
      auto k = lower(cases_[i].region);
      ASSERT_TRUE(k.has_value()) << cases_[i].name << ": lower refused";
      std::string name = kernel_name(i);
      std::string src = emit_cpp(*k, name);
      ASSERT_EQ(src, emit_cpp(*lower(cases_[i].region), name)) << cases_[i].name << ": emission is not deterministic";
      cpp[i % chunks] += src;
      cuda_sources.push_back(emit_cuda(*k, name));
      kernels.push_back(std::move(*k));
    }
    auto libs = compiler.compile_batch(cpp);
    for (size_t i = 0; i < cases_.size(); ++i) {
      std::string trace = cases_[i].name;
      trace += '\n';
      trace += to_string(kernels[i]);
      SCOPED_TRACE(trace);
      run_case(cases_[i], kernels[i], *libs[i % chunks], kernel_name(i));
    }
    check_cuda(cuda_sources);
  }

  static void check_cuda(const std::vector<std::string>& sources) {
    if (!nvrtc::available()) {
      if (nvrtc_required()) FAIL() << "NVRTC cannot be loaded (" << nvrtc::load_error() << "); set LUMINAL_ALLOW_NO_NVRTC=1 to skip";
      return;
    }
    std::string all;
    for (const auto& s : sources) all += s;
    std::string cubin;
    ASSERT_NO_THROW(cubin = nvrtc::compile(all, "batch", "sm_90"));
    EXPECT_GT(cubin.size(), 0u);
  }

 private:
  void run_case(const Case& c, const Kernel& k, const SharedLibrary& lib, const std::string& name) {
    auto* fn = lib.function<KernelFn>(name);
    auto* extent_fn = lib.function<ExtentFn>(name + "_extent");
    std::mt19937 rng(static_cast<unsigned>(std::hash<std::string>{}(c.name)));
    const Graph& g = c.region.graph;
    std::vector<NodeId> inputs = g.inputs();
    NodeId out = g.outputs().at(0);
    for (const DimMap& dims : c.dims) {
      std::vector<HostTensor> data;
      for (size_t i = 0; i < inputs.size(); ++i) {
        const Node& n = g.node(inputs[i]);
        auto numel = static_cast<size_t>(product(n.shape).eval(dims));
        data.push_back(c.data ? c.data(i, n.dtype, numel, rng) : random_tensor(n.dtype, numel, rng));
      }
      // Reference.
      ReferenceRuntime ref;
      std::vector<NodeId> ids(g.size());
      for (NodeId i = 0; i < g.size(); ++i) ids[i] = i;
      ref.load_plans({Runtime::Plan{{}, g, ids}});
      for (size_t i = 0; i < inputs.size(); ++i) ref.set_tensor(inputs[i], data[i]);
      ref.execute(dims);
      HostTensor want = ref.get_tensor(out);
      // Kernel: the outer range in two calls, as a thread pool would split it.
      std::vector<int64_t> dim_values;
      for (const auto& d : k.dim_names) dim_values.push_back(dims.at(d));
      HostTensor got = HostTensor::zeros(k.output, static_cast<size_t>(k.output_numel.eval(dims)));
      int32_t error[kErrorWords] = {};
      std::vector<void*> buffers;
      for (auto& t : data) buffers.push_back(t.bytes.data());
      buffers.push_back(got.bytes.data());
      buffers.push_back(error);
      int64_t extent = extent_fn(dim_values.data());
      ASSERT_EQ(extent, k.extent.eval(dims));
      fn(buffers.data(), dim_values.data(), 0, extent / 2);
      fn(buffers.data(), dim_values.data(), extent / 2, extent);
      EXPECT_EQ(error[0], 0);
      std::string diff = compare(got, want);
      EXPECT_EQ(diff, "") << "dims:" << [&] {
        std::string s;
        for (auto& [d, v] : dims) s += " " + d + "=" + std::to_string(v);
        return s;
      }();
    }
  }

  std::vector<Case> cases_;
};

inline HostCompiler& test_compiler() {
  static HostCompiler compiler;
  return compiler;
}

}  // namespace luminal::kernel::testing
