#include "luminal/cpu/cpu_runtime.hpp"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "luminal/compile.hpp"
#include "luminal/cpu/blas_gemm.hpp"
#include "luminal/cpu/gemm.hpp"
#include "luminal/cpu/thread_pool.hpp"
#include "luminal/egraph/egraph.hpp"
#include "luminal/error.hpp"
#include "luminal/kernel/fusion.hpp"
#include "luminal/kernel/host_compiler.hpp"
#include "luminal/plan/memory_planner.hpp"
#include "luminal/search/hlir_egraph.hpp"

namespace luminal::cpu {
namespace {

using egraph::Value;
using egraph::ValueKind;
using KernelEntry = void (*)(void* const*, const int64_t*, int64_t, int64_t);

struct CompiledKernel {
  kernel::Kernel kernel;
  std::shared_ptr<const kernel::SharedLibrary> library;
  KernelEntry entry = nullptr;
};

std::string entry_name(const std::string& region) {
  std::string name = "lk";  // (not "lk" + ...: GCC 12 warns falsely on that concatenation)
  name += std::to_string(std::hash<std::string>{}(region));
  return name;
}

// The region a program node computes, as text: a Fused op carries one; any other op that
// runs as a kernel is a region of that op alone (an Output is a copy through its view).
std::optional<std::string> region_text(const Graph& g, const Node& n) {
  if (n.op == OpKind::BackendOp) {
    if (n.backend->name == "Fused") return n.backend->str(0);
    return std::nullopt;
  }
  if (n.op == OpKind::Input || n.op == OpKind::CustomOp) return std::nullopt;
  Node proto = n;
  proto.inputs.clear();
  if (n.op == OpKind::Output) {  // a copy that materialises the view
    proto.op = OpKind::Cast;
    proto.updates = kNoNode;
    proto.label.clear();
  }
  std::vector<kernel::FuseOperand> operands;
  for (const auto& in : n.inputs) {
    const Node& src = g.node(in.node);
    operands.push_back({nullptr, src.dtype, src.shape, in.view});
  }
  auto region = kernel::singleton(proto, operands);
  LUMINAL_CHECK(region.has_value(), "cpu: ", op_name(n.op), " node cannot be lowered to a kernel");
  return kernel::serialize(*region);
}

// Views of a matmul's operands at the Mul's shape [batch?, m, n, k] as GEMM arguments.
struct GemmLayout {
  int rank = 0;
  Expression batch = 1, m, n, k;
  Expression a_offset, a_row, a_col, a_batch = 0;
  Expression b_offset, b_row, b_col, b_batch = 0;  // b_row: along k, b_col: along n
};
std::optional<GemmLayout> gemm_layout(const ShapeTracker& va, const ShapeTracker& vb) {
  int r = static_cast<int>(va.rank());
  if ((r != 3 && r != 4) || vb.rank() != va.rank()) return std::nullopt;
  if (va.has_padding() || vb.has_padding()) return std::nullopt;
  if (!(va.base_valid() == Expression(1)) || !(vb.base_valid() == Expression(1))) return std::nullopt;
  std::vector<Expression> sa, sb;
  for (int d = 0; d < r; ++d) {
    auto x = search::view_axis_stride(va.dims()[d]);
    auto y = search::view_axis_stride(vb.dims()[d]);
    if (!x || !y) return std::nullopt;
    sa.push_back(*x);
    sb.push_back(*y);
  }
  // A is broadcast along n, B along m.
  if (!(sa[r - 2] == Expression(0)) || !(sb[r - 3] == Expression(0))) return std::nullopt;
  GemmLayout g;
  g.rank = r;
  g.m = va.dims()[r - 3].size;
  g.n = va.dims()[r - 2].size;
  g.k = va.dims()[r - 1].size;
  g.a_row = sa[r - 3];
  g.a_col = sa[r - 1];
  g.b_row = sb[r - 1];
  g.b_col = sb[r - 2];
  g.a_offset = va.base_offset();
  g.b_offset = vb.base_offset();
  for (int d = 0; d < r; ++d) {
    g.a_offset = g.a_offset + va.dims()[d].offset.substitute(Expression::kIndexName, 0);
    g.b_offset = g.b_offset + vb.dims()[d].offset.substitute(Expression::kIndexName, 0);
  }
  if (r == 4) {
    g.batch = va.dims()[0].size;
    g.a_batch = sa[0];
    g.b_batch = sb[0];
  }
  return g;
}

enum class StepKind { Kernel, Gemm, BlasGemm, Custom };
struct Step {
  StepKind kind = StepKind::Kernel;
  NodeId node = 0;
  std::string region;                  // Kernel: its region text
  std::shared_ptr<CompiledKernel> kernel;
  std::optional<GemmLayout> gemm;      // Gemm / BlasGemm
};

struct ProgramPlan {
  Graph graph;
  std::vector<NodeId> external_ids;
  std::unordered_map<NodeId, NodeId> program_of;  // external id -> program node
  std::vector<Step> steps;
  // Arena layouts by the dims they were planned for.
  std::map<std::vector<int64_t>, plan::MemoryPlan> arenas;
  std::vector<std::string> dim_names;  // every dim the program mentions, sorted
};

}  // namespace

struct CpuRuntime::Shared {
  std::mutex mutex;
  kernel::HostCompiler compiler;
  std::unordered_map<std::string, std::shared_ptr<CompiledKernel>> kernels;  // by region text

  // Compile every region not compiled yet: 16 kernels per translation unit, units in
  // parallel.
  void compile(const std::vector<std::string>& wanted) {
    std::vector<std::string> regions;
    {
      std::lock_guard lock(mutex);
      for (const auto& r : wanted)
        if (!kernels.count(r) && std::find(regions.begin(), regions.end(), r) == regions.end()) regions.push_back(r);
    }
    if (regions.empty()) return;
    constexpr size_t kPerUnit = 16;
    std::vector<std::string> sources;
    std::vector<std::shared_ptr<CompiledKernel>> compiled;
    for (size_t i = 0; i < regions.size(); ++i) {
      if (i % kPerUnit == 0) sources.emplace_back();
      auto c = std::make_shared<CompiledKernel>();
      auto k = kernel::lower(kernel::parse_region(regions[i]));
      LUMINAL_CHECK(k.has_value(), "cpu: a region cannot be lowered to a kernel");
      c->kernel = std::move(*k);
      sources.back() += kernel::emit_cpp(c->kernel, entry_name(regions[i]));
      compiled.push_back(std::move(c));
    }
    auto libs = compiler.compile_batch(sources);
    std::lock_guard lock(mutex);
    for (size_t i = 0; i < regions.size(); ++i) {
      compiled[i]->library = libs[i / kPerUnit];
      compiled[i]->entry = compiled[i]->library->function<void(void* const*, const int64_t*, int64_t, int64_t)>(
          entry_name(regions[i]));
      kernels.emplace(regions[i], compiled[i]);
    }
  }
  std::shared_ptr<CompiledKernel> get(const std::string& region) {
    std::lock_guard lock(mutex);
    auto it = kernels.find(region);
    return it == kernels.end() ? nullptr : it->second;
  }
};

struct CpuRuntime::State {
  std::shared_ptr<Shared> shared;
  std::vector<ProgramPlan> slots;
  std::unordered_map<NodeId, HostTensor> data;  // by external id
  std::vector<std::byte> arena;
  int64_t last_arena = 0;

  const Node* find_io(NodeId ext) const {
    for (const auto& p : slots)
      if (auto it = p.program_of.find(ext); it != p.program_of.end()) return &p.graph.node(it->second);
    return nullptr;
  }
};

CpuRuntime::CpuRuntime() : CpuRuntime(std::make_shared<Shared>()) {}
CpuRuntime::CpuRuntime(std::shared_ptr<Shared> shared) : state_(std::make_unique<State>()) {
  state_->shared = std::move(shared);
}
CpuRuntime::~CpuRuntime() = default;
CpuRuntime::CpuRuntime(CpuRuntime&&) noexcept = default;
CpuRuntime& CpuRuntime::operator=(CpuRuntime&&) noexcept = default;

std::unique_ptr<Runtime> CpuRuntime::fresh() const { return std::make_unique<CpuRuntime>(state_->shared); }

std::vector<std::string> CpuRuntime::rule_files() const {
  return {std::string(LUMINAL_CPU_SOURCE_DIR) + "/rules/cpu.egg", kernel::fusion_rule_file()};
}

std::vector<RuleStage> CpuRuntime::rule_stages(const CompileOptions& o) const {
  auto stages = Runtime::rule_stages(o);
  stages.front().rulesets.push_back("cpu-matmul");
  stages.push_back({"fuse", {"fuse"}, 20'000, std::min(2.0, o.search_time_limit_.count())});
  return stages;
}

void CpuRuntime::register_primitives(egraph::EGraph& eg) const {
  kernel::register_fusion_primitives(eg);
  // (gemm-layout ?va ?vb): the operand views of a matmul-shaped Mul that our GEMM and
  // OpenBLAS take without copies.
  eg.register_primitive("gemm-layout", [](std::span<const Value> a) -> std::optional<Value> {
    if (a.size() != 2 || a[0].kind() != ValueKind::ExprList || a[1].kind() != ValueKind::ExprList) return std::nullopt;
    return Value::boolean(gemm_layout(search::decode_view(a[0]), search::decode_view(a[1])).has_value());
  });
  // (half-float ?dtype): F16 or BF16, which our GEMM converts while packing.
  eg.register_primitive("half-float", [](std::span<const Value> a) -> std::optional<Value> {
    if (a.size() != 1 || a[0].kind() != ValueKind::String) return std::nullopt;
    return Value::boolean(a[0].as_string() == "F16" || a[0].as_string() == "BF16");
  });
}

void CpuRuntime::prepare(std::span<const Graph* const> programs) {
  std::vector<std::string> regions;
  for (const Graph* g : programs)
    for (const Node& n : g->nodes())
      if (auto r = region_text(*g, n)) regions.push_back(std::move(*r));
  state_->shared->compile(regions);
}

void CpuRuntime::load_program(size_t slot, const Graph& program, std::vector<NodeId> external_ids) {
  LUMINAL_ASSERT(external_ids.size() == program.size(), "external id table size");
  auto& s = *state_;
  if (s.slots.size() <= slot) s.slots.resize(slot + 1);
  ProgramPlan p;
  p.graph = program;
  p.external_ids = std::move(external_ids);
  std::vector<std::string> regions;
  for (NodeId i = 0; i < program.size(); ++i) {
    const Node& n = p.graph.node(i);
    for (const auto& in : n.inputs) LUMINAL_ASSERT(in.node < i, "program is not in topological order at node ", i);
    for (const auto& d : n.shape)
      for (const auto& v : d.variables())
        if (std::find(p.dim_names.begin(), p.dim_names.end(), v) == p.dim_names.end()) p.dim_names.push_back(v);
    if ((n.op == OpKind::Input || n.op == OpKind::Output) && p.external_ids[i] != kNoNode)
      p.program_of[p.external_ids[i]] = i;
    if (n.op == OpKind::Input) continue;
    Step step;
    step.node = i;
    if (n.op == OpKind::CustomOp) {
      step.kind = StepKind::Custom;
    } else if (n.op == OpKind::BackendOp && (n.backend->name == "CpuGemm" || n.backend->name == "CpuBlasGemm")) {
      step.kind = n.backend->name == "CpuGemm" ? StepKind::Gemm : StepKind::BlasGemm;
      step.gemm = gemm_layout(n.inputs[0].view, n.inputs[1].view);
      LUMINAL_CHECK(step.gemm.has_value(), "cpu: ", n.backend->name, " with operand views it cannot take");
    } else if (n.op == OpKind::BackendOp && n.backend->name != "Fused") {
      fail("cpu: backend op '", n.backend->name, "' is not a CPU op (was the program extracted for another backend?)");
    } else {
      step.region = *region_text(p.graph, n);
      regions.push_back(step.region);
    }
    p.steps.push_back(std::move(step));
  }
  std::sort(p.dim_names.begin(), p.dim_names.end());
  s.shared->compile(regions);
  for (auto& step : p.steps)
    if (step.kind == StepKind::Kernel) step.kernel = s.shared->get(step.region);
  s.slots[slot] = std::move(p);
}

void CpuRuntime::set_tensor(NodeId input, HostTensor data) {
  const Node* n = state_->find_io(input);
  LUMINAL_CHECK(n != nullptr, "tensor ", input, " is not an input or output of the loaded program");
  LUMINAL_CHECK(n->op == OpKind::Input, "set_data: tensor ", input, " is not an input");
  state_->data[input] = data.dtype == n->dtype ? std::move(data) : data.cast(n->dtype);
}

bool CpuRuntime::has_tensor(NodeId node) const { return state_->data.count(node) > 0; }

HostTensor CpuRuntime::get_tensor(NodeId node) const {
  const Node* n = state_->find_io(node);
  LUMINAL_CHECK(n != nullptr, "tensor ", node, " is not an input or output of the loaded program");
  auto it = state_->data.find(node);
  LUMINAL_CHECK(it != state_->data.end(), "tensor ", node, " ('", n->label, "') has no data: ",
                n->op == OpKind::Output ? "execute has not run"
                                        : "it was never set, or a previous execute consumed it (persist() keeps it)");
  return it->second;
}

int64_t CpuRuntime::last_arena_bytes() const { return state_->last_arena; }
int CpuRuntime::kernels_compiled() const { return state_->shared->compiler.compiler_invocations(); }

void CpuRuntime::run(size_t slot, const DimMap& dims) {
  auto& s = *state_;
  LUMINAL_CHECK(slot < s.slots.size() && s.slots[slot].graph.size() > 0, "execute: no program loaded (compile first)");
  ProgramPlan& p = s.slots[slot];
  const Graph& g = p.graph;
  std::vector<int64_t> key;
  for (const auto& d : p.dim_names) {
    auto it = dims.find(d);
    LUMINAL_CHECK(it != dims.end(), "execute: dimension '", d,
                  "' has no value; set it with Graph::set_dim or pass it in the dim map");
    key.push_back(it->second);
  }
  // Inputs: the user's buffers, checked against their shapes.
  std::vector<std::byte*> ptr(g.size(), nullptr);
  for (NodeId i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    if (n.op != OpKind::Input) continue;
    auto it = s.data.find(p.external_ids[i]);
    LUMINAL_CHECK(it != s.data.end(), "execute: input '", n.label,
                  "' has no data (never set, or consumed by a previous execute; persist() keeps it)");
    int64_t expect = product(n.shape).eval(dims);
    LUMINAL_CHECK(static_cast<int64_t>(it->second.numel()) == expect, "execute: input '", n.label, "' has ",
                  it->second.numel(), " elements but its shape ", to_string(n.shape), " needs ", expect);
    ptr[i] = it->second.bytes.data();
  }
  // Everything else lives in the arena, planned once per dims.
  auto found = p.arenas.find(key);
  if (found == p.arenas.end())
    found = p.arenas.emplace(key, plan::plan_program(g, dims, [&](NodeId id) { return g.node(id).op != OpKind::Input; }))
                .first;
  const plan::MemoryPlan& arena = found->second;
  if (static_cast<int64_t>(s.arena.size()) < arena.arena_bytes) s.arena.resize(static_cast<size_t>(arena.arena_bytes));
  s.last_arena = arena.arena_bytes;
  for (NodeId i = 0; i < g.size(); ++i)
    if (g.node(i).op != OpKind::Input) ptr[i] = s.arena.data() + arena.offsets[i];

  ThreadPool& pool = ThreadPool::global();
  std::vector<int64_t> dim_values;
  for (const Step& step : p.steps) {
    check_deadline();
    const Node& n = g.node(step.node);
    switch (step.kind) {
      case StepKind::Kernel: {
        const kernel::Kernel& k = step.kernel->kernel;
        std::vector<void*> buffers;
        for (const auto& in : n.inputs) buffers.push_back(ptr[in.node]);
        buffers.push_back(ptr[step.node]);
        int32_t error = 0;
        buffers.push_back(&error);
        dim_values.clear();
        for (const auto& d : k.dim_names) dim_values.push_back(dims.at(d));
        int64_t extent = k.extent.eval(dims);
        int64_t grain = std::max<int64_t>(1, extent / (4 * pool.num_threads()));
        KernelEntry entry = step.kernel->entry;
        if (extent <= grain) entry(buffers.data(), dim_values.data(), 0, extent);
        else pool.parallel_for(0, extent, grain, [&](int64_t b, int64_t e) { entry(buffers.data(), dim_values.data(), b, e); });
        if (error != 0) {
          const char* what = error == 1 ? "integer modulo by zero" : error == 2 ? "gather index out of range"
                                                                                : "scatter index out of range";
          fail(n.user_op.empty() ? std::string(op_name(n.op)) : n.user_op, ": ", what);
        }
        break;
      }
      case StepKind::Gemm:
      case StepKind::BlasGemm: {
        const GemmLayout& l = *step.gemm;
        GemmArgs a;
        a.m = l.m.eval(dims);
        a.n = l.n.eval(dims);
        a.k = l.k.eval(dims);
        a.batch = l.batch.eval(dims);
        const DType b_dtype = g.node(n.inputs[1].node).dtype;
        a.a = reinterpret_cast<const float*>(ptr[n.inputs[0].node]) + l.a_offset.eval(dims);
        a.a_row_stride = l.a_row.eval(dims);
        a.a_col_stride = l.a_col.eval(dims);
        a.a_batch_stride = l.a_batch.eval(dims);
        a.b = ptr[n.inputs[1].node] + l.b_offset.eval(dims) * static_cast<int64_t>(dtype_bytes(b_dtype));
        a.b_dtype = b_dtype;
        a.b_row_stride = l.b_row.eval(dims);
        a.b_col_stride = l.b_col.eval(dims);
        a.b_batch_stride = l.b_batch.eval(dims);
        a.c = reinterpret_cast<float*>(ptr[step.node]);
        a.c_row_stride = a.n;
        a.c_batch_stride = a.m * a.n;
        if (step.kind == StepKind::Gemm || !blas_gemm(a)) gemm(a);
        break;
      }
      case StepKind::Custom: {
        std::vector<HostTensor> ins;
        for (const auto& in : n.inputs) {
          // Materialise the view through the reference interpreter's rules: a copy kernel.
          const Node& src = g.node(in.node);
          HostTensor whole = HostTensor::zeros(src.dtype, static_cast<size_t>(product(src.shape).eval(dims)));
          std::memcpy(whole.bytes.data(), ptr[in.node], whole.bytes.size());
          LUMINAL_CHECK(in.view.is_contiguous() && in.view.shape() == src.shape, "cpu: custom op '", n.custom->name(),
                        "' reads its input through a view; only contiguous inputs are supported on this backend");
          ins.push_back(std::move(whole));
        }
        std::vector<int64_t> shape;
        for (const auto& d : n.shape) shape.push_back(d.eval(dims));
        HostTensor r = n.custom->execute_reference(ins, shape, n.dtype);
        LUMINAL_CHECK(r.dtype == n.dtype && r.numel() == static_cast<size_t>(product(n.shape).eval(dims)),
                      "custom op '", n.custom->name(), "' returned the wrong size or dtype");
        std::memcpy(ptr[step.node], r.bytes.data(), r.bytes.size());
        break;
      }
    }
  }
  // Outputs become the user's data; state updates land in their inputs; inputs that do
  // not persist are consumed.
  std::vector<std::pair<NodeId, HostTensor>> results;
  for (NodeId i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    if (n.op != OpKind::Output) continue;
    HostTensor t = HostTensor::zeros(n.dtype, static_cast<size_t>(product(n.shape).eval(dims)));
    std::memcpy(t.bytes.data(), ptr[i], t.bytes.size());
    if (n.updates != kNoNode) results.emplace_back(p.external_ids[n.updates], t);
    if (p.external_ids[i] != kNoNode) results.emplace_back(p.external_ids[i], std::move(t));
  }
  for (NodeId i = 0; i < g.size(); ++i)
    if (g.node(i).op == OpKind::Input && !g.node(i).persist) s.data.erase(p.external_ids[i]);
  for (auto& [ext, t] : results) s.data[ext] = std::move(t);
}

}  // namespace luminal::cpu
