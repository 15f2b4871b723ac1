// Runtimes: compile a Graph into a registered runtime, move data in and out
// (DLPack / NumPy through nanobind's ndarray), execute and profile.
//
// Copies: an input crosses once (the runtime interface takes an owned HostTensor, so the
// array's bytes are copied into it; a non-contiguous array is gathered in the same pass).
// An output is handed out without a further copy: the array owns the runtime's buffer.
// The reference runtime itself computes in double, converting on the way in and out.
#include <cstring>

#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"

namespace luminal::python {
namespace {

using AnyArray = nb::ndarray<nb::ro>;

DType dtype_of(const nb::dlpack::dtype& d) {
  using code = nb::dlpack::dtype_code;
  const auto c = static_cast<code>(d.code);
  if (d.lanes == 1) {
    if (c == code::Float && d.bits == 32) return DType::F32;
    if (c == code::Float && d.bits == 16) return DType::F16;
    if (c == code::Float && d.bits == 64) return DType::F64;
    if (c == code::Bfloat && d.bits == 16) return DType::BF16;
    if (c == code::Int && d.bits == 32) return DType::I32;
    if (c == code::Int && d.bits == 64) return DType::I64;
    if (c == code::Int && d.bits == 8) return DType::I8;
    if (c == code::UInt && d.bits == 8) return DType::U8;
    if (c == code::Bool && d.bits == 8) return DType::Bool;
  }
  fail("set_data: unsupported array element type (DLPack code ", int(d.code), ", ", int(d.bits),
       " bits); supported: float16/32/64, bfloat16, int8/32/64, uint8, bool");
}

nb::dlpack::dtype dlpack_of(DType d) {
  using code = nb::dlpack::dtype_code;
  auto make = [](code c, int bits) { return nb::dlpack::dtype{static_cast<uint8_t>(c), static_cast<uint8_t>(bits), 1}; };
  switch (d) {
    case DType::F32: return make(code::Float, 32);
    case DType::F16: return make(code::Float, 16);
    case DType::F64: return make(code::Float, 64);
    case DType::BF16: return make(code::Bfloat, 16);
    case DType::I32: return make(code::Int, 32);
    case DType::I64: return make(code::Int, 64);
    case DType::I8: return make(code::Int, 8);
    case DType::U8: return make(code::UInt, 8);
    case DType::Bool: return make(code::Bool, 8);
  }
  LUMINAL_ASSERT(false, "unhandled dtype");
  return make(code::Float, 32);
}

// The array's elements in row-major order, in its own dtype.
HostTensor host_from_array(const AnyArray& a) {
  HostTensor h;
  h.dtype = dtype_of(a.dtype());
  const size_t esize = dtype_bytes(h.dtype);
  size_t numel = 1;
  for (size_t i = 0; i < a.ndim(); ++i) {
    h.shape.push_back(static_cast<int64_t>(a.shape(i)));
    numel *= a.shape(i);
  }
  h.bytes.resize(numel * esize);
  const auto* src = static_cast<const std::byte*>(a.data());
  bool contiguous = true;
  int64_t expect = 1;
  for (size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) != 1 && a.stride(i) != expect) contiguous = false;
    expect *= static_cast<int64_t>(a.shape(i));
  }
  if (numel == 0) return h;
  if (contiguous) {
    std::memcpy(h.bytes.data(), src, h.bytes.size());
    return h;
  }
  // Strided gather (strides are in elements).
  std::vector<size_t> idx(a.ndim(), 0);
  for (size_t flat = 0; flat < numel; ++flat) {
    int64_t off = 0;
    for (size_t d = 0; d < a.ndim(); ++d) off += static_cast<int64_t>(idx[d]) * a.stride(d);
    std::memcpy(h.bytes.data() + flat * esize, src + off * static_cast<int64_t>(esize), esize);
    for (size_t d = a.ndim(); d-- > 0;) {
      if (++idx[d] < a.shape(d)) break;
      idx[d] = 0;
    }
  }
  return h;
}

DimMap dims_from(const PyRuntime& r, const std::map<std::string, int64_t>& dims) {
  DimMap out = r.last_dims;
  for (const auto& [k, v] : dims) out[k] = v;
  return out;
}

// The shape of a tensor under the dims of the last execute (flat when unknown).
std::vector<int64_t> shape_of(const PyRuntime& r, const GraphTensor& t, size_t numel) {
  std::vector<int64_t> shape;
  int64_t n = 1;
  for (const auto& d : t.shape()) {
    auto v = d.try_eval(r.last_dims);
    if (!v) return {static_cast<int64_t>(numel)};
    shape.push_back(*v);
    n *= *v;
  }
  if (static_cast<size_t>(n) != numel) return {static_cast<int64_t>(numel)};
  return shape;
}

template <class Framework>
nb::ndarray<Framework> to_array(HostTensor h, const std::vector<int64_t>& shape_in) {
  auto* owned = new HostTensor(std::move(h));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<HostTensor*>(p); });
  std::vector<size_t> shape(shape_in.begin(), shape_in.end());
  return nb::ndarray<Framework>(owned->bytes.data(), shape.size(), shape.data(), owner, nullptr,
                                dlpack_of(owned->dtype));
}

NodeId node_of(const PyRuntime& r, const std::variant<GraphTensor, NodeId>& t) {
  if (const auto* gt = std::get_if<GraphTensor>(&t)) {
    LUMINAL_CHECK(r.graph_uid == 0 || gt->graph().uid() == r.graph_uid,
                  "tensor ", gt->id(), " belongs to a different graph than the one this runtime was compiled from");
    return gt->id();
  }
  return std::get<NodeId>(t);
}

HostTensor get_host(const PyRuntime& r, const std::variant<GraphTensor, NodeId>& t, std::optional<GraphTensor>* gt) {
  HostTensor h = r.runtime->get_tensor(node_of(r, t));
  if (const auto* g = std::get_if<GraphTensor>(&t)) *gt = *g;
  return h;
}

}  // namespace

std::unique_ptr<PyRuntime> compile_graph(const Graph& g, const std::string& runtime,
                                         const std::optional<CompileOptions>& options) {
  const RuntimeEntry& entry = find_runtime(runtime);
  auto r = std::make_unique<PyRuntime>();
  r->runtime = entry.make();
  r->kind = entry.name;
  r->device = entry.device;
  r->graph_uid = g.uid();
  r->last_dims = g.dim_map();
  CompileOptions o = options.value_or(CompileOptions{});
  o.report(&r->report);
  nb::gil_scoped_release release;
  g.compile_into(*r->runtime, o);
  return r;
}

void bind_runtime(nb::module_& m) {
  nb::class_<PyRuntime>(m, "Runtime", "A compiled program on a backend: set inputs, execute, read outputs.")
      .def_prop_ro("name", [](const PyRuntime& r) { return r.kind; })
      .def_prop_ro("device", [](const PyRuntime& r) { return r.device; })
      .def_prop_ro("report", [](const PyRuntime& r) { return r.report; }, "What the compile did, phase by phase.")
      .def("execute", [](PyRuntime& r, const std::map<std::string, int64_t>& dims) {
             DimMap d = dims_from(r, dims);
             nb::gil_scoped_release release;
             r.runtime->execute(d);
             r.last_dims = std::move(d);
           }, "dims"_a = std::map<std::string, int64_t>{},
           "Run the program. `dims` gives the dynamic dims (others keep their last value).")
      .def("profile", [](PyRuntime& r, const std::map<std::string, int64_t>& dims, int trials, double timeout_s) {
             DimMap d = dims_from(r, dims);
             nb::gil_scoped_release release;
             ProfileOptions po;
             po.trials = trials;
             po.timeout = std::chrono::duration<double>(timeout_s);
             auto p = r.runtime->profile(d, po);
             return p.seconds;
           }, "dims"_a = std::map<std::string, int64_t>{}, "trials"_a = 3, "timeout_s"_a = 60.0,
           "Seconds per execution over `trials` runs.")
      .def("set_data", [](PyRuntime& r, const std::variant<GraphTensor, NodeId>& t, const AnyArray& a) {
             // The runtime interface takes host data (a device runtime uploads it itself), so a
             // device array is never read from the host; the caller copies it explicitly.
             LUMINAL_CHECK(a.device_type() == nb::device::cpu::value, "set_data: the array lives on a device ",
                           "(DLPack device type ", a.device_type(), "); runtime '", r.kind, "' (device ", r.device,
                           ") takes host arrays: copy it to the CPU explicitly (e.g. tensor.cpu())");
             HostTensor h = host_from_array(a);
             NodeId id = node_of(r, t);
             if (const auto* gt = std::get_if<GraphTensor>(&t)) {
               auto n = gt->numel().as_constant();
               LUMINAL_CHECK(!n || *n == static_cast<int64_t>(h.numel()), "set_data: tensor ", id, " of shape ",
                             to_string(gt->shape()), " needs ", *n, " elements, got an array of ", h.numel());
               h = h.cast(gt->dtype());
             }
             r.runtime->set_tensor(id, std::move(h));
           }, "tensor"_a, "array"_a,
           "Feed an input from any DLPack/NumPy array (copied once into the runtime; converted to the "
           "tensor's dtype).")
      .def("set_data", [](PyRuntime& r, const std::variant<GraphTensor, NodeId>& t, const std::vector<double>& v) {
             NodeId id = node_of(r, t);
             HostTensor h = HostTensor::from<double>(v, DType::F64);
             if (const auto* gt = std::get_if<GraphTensor>(&t)) {
               auto n = gt->numel().as_constant();
               LUMINAL_CHECK(!n || *n == static_cast<int64_t>(h.numel()), "set_data: tensor ", id, " of shape ",
                             to_string(gt->shape()), " needs ", *n, " elements, got ", h.numel());
               h = h.cast(gt->dtype());
             }
             r.runtime->set_tensor(id, std::move(h));
           }, "tensor"_a, "values"_a, "Feed an input from a flat list of numbers.")
      .def("get", [](const PyRuntime& r, const std::variant<GraphTensor, NodeId>& t) {
             std::optional<GraphTensor> gt;
             HostTensor h = get_host(r, t, &gt);
             if (h.dtype == DType::BF16) h = h.cast(DType::F32);  // NumPy has no bfloat16
             auto shape = gt ? shape_of(r, *gt, h.numel()) : std::vector<int64_t>{static_cast<int64_t>(h.numel())};
             return to_array<nb::numpy>(std::move(h), shape);
           }, "tensor"_a, "An output or persisted input as a NumPy array (bfloat16 comes back as float32).")
      .def("get_dlpack", [](const PyRuntime& r, const std::variant<GraphTensor, NodeId>& t) {
             std::optional<GraphTensor> gt;
             HostTensor h = get_host(r, t, &gt);
             auto shape = gt ? shape_of(r, *gt, h.numel()) : std::vector<int64_t>{static_cast<int64_t>(h.numel())};
             return to_array<nb::ro>(std::move(h), shape);
           }, "tensor"_a,
           "An output as a DLPack array in its own dtype (torch.from_dlpack takes it without a copy).")
      .def("has_data", [](const PyRuntime& r, const std::variant<GraphTensor, NodeId>& t) {
             return r.runtime->has_tensor(node_of(r, t));
           }, "tensor"_a)
      .def("load_safetensors", [](PyRuntime& r, const Graph& g, const std::string& path, bool allow_missing) {
             return r.runtime->load_safetensors(g, path, allow_missing);
           }, "graph"_a, "path"_a, "allow_missing"_a = true,
           "Fill inputs whose names match tensors of a safetensors file; returns the names loaded.");

  m.def("runtimes", [] {
    std::vector<std::map<std::string, std::string>> out;
    for (const auto& e : runtime_registry())
      out.push_back({{"name", e.name}, {"device", e.device}, {"description", e.description}});
    return out;
  }, "The registered runtimes (name, device, description).");

  m.def("compile", &compile_graph, "graph"_a, "runtime"_a = "reference", "options"_a = nb::none(),
        "Lower, search and load `graph` into the runtime registered as `runtime`.");
  nb::type<Graph>().attr("compile") = nb::cpp_function(
      &compile_graph, nb::is_method(), "runtime"_a = "reference", "options"_a = nb::none(),
      "Lower, search and load this graph into the runtime registered as `runtime` (luminal.runtimes()).");
}

}  // namespace luminal::python
