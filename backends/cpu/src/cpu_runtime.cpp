#include "luminal/cpu/cpu_runtime.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "luminal/compile.hpp"
#include "luminal/cpu/blas_gemm.hpp"
#include "luminal/cpu/custom_kernel.hpp"
#include "luminal/cpu/gemm.hpp"
#include "luminal/cpu/thread_pool.hpp"
#include "luminal/egraph/egraph.hpp"
#include "luminal/error.hpp"
#include "luminal/kernel/fusion.hpp"
#include "luminal/kernel/kernel_cache.hpp"
#include "luminal/kernel/program_kernels.hpp"
#include "luminal/plan/memory_planner.hpp"
#include "luminal/reference_runtime.hpp"
#include "luminal/search/hlir_egraph.hpp"

namespace luminal::cpu {
namespace {

using egraph::Value;
using egraph::ValueKind;
using KernelEntry = void (*)(void* const*, const int64_t*, int64_t, int64_t);
// Below these sizes a step runs on the calling thread.
constexpr int64_t kSerialElements = 1 << 15;
constexpr int64_t kSerialMacs = 1 << 18;

using CompiledKernel = kernel::CppKernelCache::Compiled;

using kernel::GemmLayout;
using kernel::GemmOperand;
using kernel::gemm_layout;
std::optional<std::string> region_text(const Graph& g, const Node& n) { return kernel::node_region_text(g, n, "cpu"); }

// A matmul's operands at execute time: one GemmArgs call (sizes, strides; the caller sets
// the pointers) repeated over the outer batch axes that remain. Axes of size 1 are
// dropped; a batch axis that B broadcasts and along which A's rows continue (always so
// when m == 1: grouped-query attention in decode) becomes more rows of one GEMM; adjacent
// batch axes with compatible strides merge.
struct GemmCall {
  GemmArgs args;
  struct Loop {
    int64_t size, a, b, c;  // element strides
  };
  std::vector<Loop> loops;  // outermost first
  bool empty = false;       // an axis of size 0: C has no elements
  int64_t macs() const {
    int64_t n = args.batch * args.m * args.n * args.k;
    for (const auto& l : loops) n *= l.size;
    return n;
  }
  // fn(args) for every index of the loops, with a, b, c advanced (b in bytes of its dtype).
  template <class Fn>
  void for_each(Fn&& fn) const {
    if (empty) return;
    const int64_t eb = static_cast<int64_t>(dtype_bytes(args.b_dtype));
    std::vector<int64_t> index(loops.size(), 0);
    for (;;) {
      GemmArgs a = args;
      for (size_t d = 0; d < loops.size(); ++d) {
        a.a += index[d] * loops[d].a;
        a.b = static_cast<const std::byte*>(a.b) + index[d] * loops[d].b * eb;
        a.c += index[d] * loops[d].c;
      }
      fn(a);
      size_t d = loops.size();
      while (d > 0 && ++index[d - 1] == loops[d - 1].size) index[--d] = 0;
      if (d == 0) return;
    }
  }
};

// Our GEMMs of one A, read the same way (an attention block's q, k and v projections; an
// MLP's gate and up), each over a persisted weight no Output updates: gemm_group packs A
// once for all of them and runs them in one parallel region. kernel::adjoin_siblings puts
// them in a row.
bool gemm_siblings(const Graph& g, const Node& a, const Node& b) {
  auto weight_gemm = [&](const Node& n) {
    if (n.op != OpKind::BackendOp || n.backend->name != "CpuGemm" || n.inputs.size() != 2) return false;
    const Node& w = g.node(n.inputs[1].node);
    return w.op == OpKind::Input && w.persist;
  };
  if (!weight_gemm(a) || !weight_gemm(b) || a.inputs[0].node != b.inputs[0].node) return false;
  const auto la = gemm_layout(a.inputs[0].view, a.inputs[1].view);
  const auto lb = gemm_layout(b.inputs[0].view, b.inputs[1].view);
  if (!la || !lb) return false;
  const GemmOperand &xa = la->a, &xb = lb->a;
  if (!(la->m == lb->m && la->k == lb->k && la->batch == lb->batch && la->outer.empty() && lb->outer.empty() &&
        !xa.copy && !xb.copy && !la->b.copy && !lb->b.copy && xa.offset == xb.offset && xa.row == xb.row &&
        xa.col == xb.col && xa.batch == xb.batch))
    return false;
  for (const Node& n : g.nodes())  // a weight the program updates is state: never packed
    if (n.op == OpKind::Output && (n.updates == a.inputs[1].node || n.updates == b.inputs[1].node)) return false;
  return true;
}

GemmCall gemm_call(const GemmLayout& l, const DimMap& dims) {
  GemmCall call;
  GemmArgs& a = call.args;
  a.m = l.m.eval(dims);
  a.n = l.n.eval(dims);
  a.k = l.k.eval(dims);
  a.a_row_stride = l.a.row.eval(dims);
  a.a_col_stride = l.a.col.eval(dims);
  a.b_row_stride = l.b.row.eval(dims);
  a.b_col_stride = l.b.col.eval(dims);
  a.c_row_stride = a.n;
  // Batch axes, outermost first; C is contiguous [batch axes..., m, n].
  std::vector<GemmCall::Loop> axes;
  for (size_t d = 0; d < l.outer.size(); ++d)
    axes.push_back({l.outer[d].eval(dims), l.a.outer[d].eval(dims), l.b.outer[d].eval(dims), 0});
  if (l.rank >= 4) axes.push_back({l.batch.eval(dims), l.a.batch.eval(dims), l.b.batch.eval(dims), 0});
  int64_t c_stride = a.m * a.n;
  for (size_t d = axes.size(); d-- > 0;) {
    axes[d].c = c_stride;
    c_stride *= axes[d].size;
  }
  std::erase_if(axes, [](const GemmCall::Loop& x) { return x.size == 1; });
  call.empty = std::any_of(axes.begin(), axes.end(), [](const GemmCall::Loop& x) { return x.size == 0; });
  if (call.empty) return call;
  // Fold the innermost batch axes into the rows while B is broadcast along them.
  while (!axes.empty() && a.m > 0) {
    const GemmCall::Loop& x = axes.back();
    if (x.b != 0 || x.c != a.m * a.c_row_stride || (a.m > 1 && x.a != a.m * a.a_row_stride)) break;
    if (a.m == 1) a.a_row_stride = x.a;
    a.m *= x.size;
    axes.pop_back();
  }
  // Merge adjacent axes that step like one.
  for (size_t d = axes.size(); d-- > 1;) {
    GemmCall::Loop &outer = axes[d - 1], &inner = axes[d];
    if (outer.a == inner.size * inner.a && outer.b == inner.size * inner.b && outer.c == inner.size * inner.c) {
      inner.size *= outer.size;
      axes.erase(axes.begin() + static_cast<std::ptrdiff_t>(d - 1));
    }
  }
  if (!axes.empty()) {
    a.batch = axes.back().size;
    a.a_batch_stride = axes.back().a;
    a.b_batch_stride = axes.back().b;
    a.c_batch_stride = axes.back().c;
    axes.pop_back();
  }
  call.loops = std::move(axes);
  return call;
}

enum class StepKind { Kernel, Gemm, BlasGemm, Custom };
struct Step {
  StepKind kind = StepKind::Kernel;
  NodeId node = 0;
  std::string region;                  // Kernel: its region text
  std::shared_ptr<const CompiledKernel> kernel;
  std::optional<GemmLayout> gemm;      // Gemm / BlasGemm
  std::string copy_region[2];          // Gemm: copy kernels of operands that are not linear
  std::shared_ptr<const CompiledKernel> copy_kernel[2];
  std::vector<std::string> custom_copy_regions;  // Custom: per input, a copy kernel ("" when contiguous)
  std::vector<std::shared_ptr<const CompiledKernel>> custom_copies;
  // Gemm: the number of sibling steps right after this one that run with it (gemm_group);
  // those are `joined` and do nothing of their own.
  size_t siblings = 0;
  bool joined = false;
};

std::string copy_region(DType dtype, const Shape& shape, const ShapeTracker& view) {
  return kernel::copy_region_text(dtype, shape, view, "cpu");
}

struct ProgramPlan {
  Graph graph;
  std::vector<NodeId> external_ids;
  std::unordered_map<NodeId, NodeId> program_of;  // external id -> program node
  std::vector<Step> steps;
  // The arena layout, planned for the largest size each buffer has had so far; dims that
  // fit it (most decode steps) reuse it without planning.
  std::vector<plan::BufferUse> planned_uses;
  plan::MemoryPlan arena;
  std::vector<std::string> dim_names;  // every dim the program mentions, sorted
  // State updates run in place (KV-cache appends): the scatter writes into the state's
  // buffer and its update Output is void (kernel::in_place_update).
  std::vector<kernel::InPlaceUpdate> in_place;
  std::vector<char> in_place_output;  // per node: an update Output made void
  std::vector<bool> is_state;          // by program node: an Input some Output updates
  // Outputs that read their producer whole (by Output node -> producer): the producer
  // writes straight into the tensor the user receives, so no copy out of the arena.
  // That tensor is a spare (the result of the run before, recycled), so a failed run never
  // clobbers the result the user holds.
  std::unordered_map<NodeId, NodeId> direct_outputs;
  std::unordered_map<NodeId, HostTensor> spare_outputs;  // by Output node: every Output's recycled tensor
  // Kernels that read nothing and have a static shape (the Iota of a convolution's
  // im2col indexes: 10 ns per element of divisions and modulos) compute the same values on
  // every run: each runs once, on the first run, into a buffer of its own outside the arena.
  std::vector<char> computed_once;                                  // by program node
  std::unordered_map<NodeId, std::vector<std::byte>> once_values;  // by node: its buffer
  std::vector<char> once_ready;                                     // by node: computed
};

}  // namespace

struct CpuRuntime::Shared {
  kernel::CppKernelCache kernels;
  void compile(const std::vector<std::string>& regions) { kernels.compile(regions); }
  std::shared_ptr<const CompiledKernel> get(const std::string& region) { return kernels.get(region); }
};

struct CpuRuntime::State {
  // An update Output run in place (a KV-cache append) that the caller may read: it reads
  // as its state, by external id, instead of a copy of the whole cache made every run.
  std::unordered_map<NodeId, NodeId> output_state;
  // LUMINAL_CPU_PROFILE=1: time every step and print the slowest on destruction.
  bool profile_steps = std::getenv("LUMINAL_CPU_PROFILE") != nullptr;
  std::map<std::string, std::pair<double, int64_t>> step_time;  // description -> (seconds, runs)
  ~State() {
    if (!profile_steps || step_time.empty()) return;
    std::vector<std::pair<double, std::string>> rows;
    for (auto& [what, t] : step_time) {
      std::string row = std::to_string(t.second);
      row += "x ";
      row += what;
      rows.emplace_back(t.first, std::move(row));
    }
    std::sort(rows.rbegin(), rows.rend());
    std::fprintf(stderr, "cpu profile (slowest steps):\n");
    for (size_t i = 0; i < rows.size() && i < 12; ++i)
      std::fprintf(stderr, "  %9.3f ms  %s\n", rows[i].first * 1e3, rows[i].second.substr(0, 400).c_str());
  }
  std::shared_ptr<Shared> shared;
  std::vector<ProgramPlan> slots;
  std::unordered_map<NodeId, HostTensor> data;  // by external id
  std::vector<std::byte> arena;
  std::vector<std::byte> scratch[2];  // matmul operands copied contiguously
  int64_t last_arena = 0;

  // Persisted weights packed once for our GEMM's blocked path (by external id), instead of
  // on every call. Valid while the input's data is unchanged: set_tensor and state
  // updates of that input drop its entries. At most packed_budget bytes in all
  // (LUMINAL_CPU_PACKED_WEIGHTS_MB; past it, B is packed on every call as before).
  struct PackedWeight {
    const void* b;
    DType dtype;
    int64_t k, n, row_stride, col_stride;
    std::shared_ptr<const PackedB> packed;
  };
  std::unordered_map<NodeId, std::vector<PackedWeight>> packed_weights;
  int64_t packed_bytes = 0;
  int64_t gemms_grouped = 0;  // GEMM steps that ran in the region of the sibling before them
  const int64_t packed_budget = [] {
    const char* v = std::getenv("LUMINAL_CPU_PACKED_WEIGHTS_MB");
    return (v != nullptr && *v != '\0' ? std::max(0L, std::strtol(v, nullptr, 10)) : 1024L) << 20;
  }();

  const PackedB* packed_weight(NodeId ext, const GemmArgs& a) {
    auto& entries = packed_weights[ext];
    for (const auto& e : entries)
      if (e.b == a.b && e.dtype == a.b_dtype && e.k == a.k && e.n == a.n && e.row_stride == a.b_row_stride &&
          e.col_stride == a.b_col_stride && e.packed->isa == active_isa())
        return e.packed.get();
    if (packed_bytes + packed_b_bytes(a) > packed_budget) return nullptr;
    auto packed = std::make_shared<const PackedB>(pack_b(a));
    packed_bytes += packed->bytes();
    entries.push_back({a.b, a.b_dtype, a.k, a.n, a.b_row_stride, a.b_col_stride, packed});
    return packed.get();
  }
  void forget_packed(NodeId ext) {
    auto it = packed_weights.find(ext);
    if (it == packed_weights.end()) return;
    for (const auto& e : it->second) packed_bytes -= e.packed->bytes();
    packed_weights.erase(it);
  }

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

std::unique_ptr<Runtime> CpuRuntime::verification_oracle(const Graph& segment, const DimMap& dims) const {
  // Work the interpreter would do: every node's elements at these dims (a matmul's
  // broadcast product counts its multiply-adds). At ~1e8 elements per second in double,
  // this bound is about a second; compiling an unrewritten segment's ~50 kernels took 1-3 s
  // on 2 cores (the shipped model: 4.9 of a 13 s cold compile).
  constexpr double kMaxInterpretedElements = 5e7;
  double elements = 0;
  for (const Node& n : segment.nodes()) {
    if (n.op == OpKind::Input || n.op == OpKind::Output) continue;
    const auto count = product(n.shape).try_eval(dims);
    if (!count) return nullptr;
    elements += static_cast<double>(*count);
    if (elements > kMaxInterpretedElements) return nullptr;
  }
  return std::make_unique<ReferenceRuntime>();
}

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
}

void CpuRuntime::prepare(std::span<const Graph* const> programs) {
  std::vector<std::string> regions;
  for (const Graph* p : programs) {
    std::vector<NodeId> renumbered;
    const Graph g = kernel::fuse_program(*p, renumbered);  // as load_program will run it
    for (const Node& n : g.nodes())
      if (auto r = region_text(g, n)) regions.push_back(std::move(*r));
  }
  state_->shared->compile(regions);
}

void CpuRuntime::load_program(size_t slot, const Graph& program, std::vector<NodeId> external_ids) {
  auto& s = *state_;
  if (s.slots.size() <= slot) s.slots.resize(slot + 1);
  ProgramPlan p;
  kernel::RunnableProgram runnable = kernel::runnable_program(program, external_ids);
  kernel::adjoin_siblings(runnable, [&](const Node& a, const Node& b) { return gemm_siblings(runnable.graph, a, b); });
  p.graph = std::move(runnable.graph);
  p.external_ids = std::move(runnable.external_ids);
  p.dim_names = std::move(runnable.dim_names);
  p.program_of = std::move(runnable.program_of);
  p.is_state.assign(p.graph.size(), false);
  for (const Node& n : p.graph.nodes())
    if (n.op == OpKind::Output && n.updates != kNoNode) p.is_state[n.updates] = true;
  std::vector<std::string> regions;
  for (NodeId i = 0; i < p.graph.size(); ++i) {
    const Node& n = p.graph.node(i);
    if (n.op == OpKind::Input) continue;
    Step step;
    step.node = i;
    if (n.op == OpKind::CustomOp) {
      step.kind = StepKind::Custom;
      for (const auto& in : n.inputs) {
        const Node& src = p.graph.node(in.node);
        bool direct = in.view.is_contiguous() && in.view.shape() == src.shape;
        step.custom_copy_regions.push_back(direct ? std::string() : copy_region(src.dtype, src.shape, in.view));
        if (!direct) regions.push_back(step.custom_copy_regions.back());
      }
    } else if (n.op == OpKind::BackendOp && (n.backend->name == "CpuGemm" || n.backend->name == "CpuBlasGemm")) {
      step.kind = n.backend->name == "CpuGemm" ? StepKind::Gemm : StepKind::BlasGemm;
      step.gemm = gemm_layout(n.inputs[0].view, n.inputs[1].view);
      LUMINAL_CHECK(step.gemm.has_value(), "cpu: ", n.backend->name, " with operand views it cannot take");
      const GemmOperand* ops[] = {&step.gemm->a, &step.gemm->b};
      for (int o = 0; o < 2; ++o)
        if (ops[o]->copy) {
          const Node& src = p.graph.node(n.inputs[o].node);
          DType dt = o == 0 ? DType::F32 : src.dtype;
          step.copy_region[o] = copy_region(dt, src.shape, ops[o]->copy_view);
          regions.push_back(step.copy_region[o]);
        }
    } else if (n.op == OpKind::BackendOp && n.backend->name != "Fused") {
      fail("cpu: backend op '", n.backend->name, "' is not a CPU op (was the program extracted for another backend?)");
    } else {
      step.region = *region_text(p.graph, n);
      regions.push_back(step.region);
    }
    p.steps.push_back(std::move(step));
  }
  for (size_t i = 0; i < p.steps.size(); ++i) {
    if (p.steps[i].kind != StepKind::Gemm || p.steps[i].joined) continue;
    const Node& first = p.graph.node(p.steps[i].node);
    for (size_t j = i + 1; j < p.steps.size() && p.steps[j].kind == StepKind::Gemm &&
                           gemm_siblings(p.graph, first, p.graph.node(p.steps[j].node));
         ++j) {
      p.steps[i].siblings++;
      p.steps[j].joined = true;
    }
  }
  s.shared->compile(regions);
  for (auto& step : p.steps) {
    if (step.kind == StepKind::Kernel) step.kernel = s.shared->get(step.region);
    for (int o = 0; o < 2; ++o)
      if (!step.copy_region[o].empty()) step.copy_kernel[o] = s.shared->get(step.copy_region[o]);
    for (const auto& r : step.custom_copy_regions) step.custom_copies.push_back(r.empty() ? nullptr : s.shared->get(r));
    if (step.kind == StepKind::Kernel)
      if (auto u = kernel::in_place_update(p.graph, step.node, step.kernel->kernel)) p.in_place.push_back(*u);
  }
  p.in_place_output.assign(p.graph.size(), 0);
  for (const auto& u : p.in_place) p.in_place_output[u.output] = 1;
  std::vector<char> claimed(p.graph.size(), 0);
  for (const auto& u : p.in_place) claimed[u.scatter] = 1;
  for (NodeId i = 0; i < p.graph.size(); ++i) {
    const Node& n = p.graph.node(i);
    if (n.op != OpKind::Output || p.in_place_output[i]) continue;
    const NodeId src = n.inputs[0].node;
    const Node& producer = p.graph.node(src);
    if (producer.op == OpKind::Input || producer.op == OpKind::Output || claimed[src] || producer.dtype != n.dtype ||
        !n.inputs[0].view.is_contiguous() || n.inputs[0].view.shape() != producer.shape)
      continue;
    claimed[src] = 1;
    p.direct_outputs[i] = src;
  }
  p.computed_once.assign(p.graph.size(), 0);
  p.once_ready.assign(p.graph.size(), 0);
  for (const Step& step : p.steps) {
    const Node& n = p.graph.node(step.node);
    if (step.kind != StepKind::Kernel || n.op == OpKind::Output || !n.inputs.empty() || claimed[step.node] ||
        !step.kernel->kernel.dim_names.empty())
      continue;
    std::optional<int64_t> numel = product(n.shape).as_constant();
    if (!numel) continue;
    p.computed_once[step.node] = 1;
    p.once_values[step.node].resize(static_cast<size_t>(*numel) * dtype_bytes(n.dtype));
  }
  s.slots[slot] = std::move(p);
}

void CpuRuntime::set_tensor(NodeId input, HostTensor data) {
  const Node* n = state_->find_io(input);
  LUMINAL_CHECK(n != nullptr, "tensor ", input, " is not an input or output of the loaded program");
  LUMINAL_CHECK(n->op == OpKind::Input, "set_data: tensor ", input, " is not an input");
  state_->forget_packed(input);  // a packed copy of the old data is stale
  state_->data[input] = data.dtype == n->dtype ? std::move(data) : data.cast(n->dtype);
}

bool CpuRuntime::has_tensor(NodeId node) const {
  auto alias = state_->output_state.find(node);
  return state_->data.count(alias != state_->output_state.end() ? alias->second : node) > 0;
}

HostTensor CpuRuntime::get_tensor(NodeId node) const {
  const Node* n = state_->find_io(node);
  LUMINAL_CHECK(n != nullptr, "tensor ", node, " is not an input or output of the loaded program");
  auto alias = state_->output_state.find(node);
  auto it = state_->data.find(alias != state_->output_state.end() ? alias->second : node);
  LUMINAL_CHECK(it != state_->data.end(), "tensor ", node, " ('", n->label, "') has no data: ",
                n->op == OpKind::Output ? "execute has not run"
                                        : "it was never set, or a previous execute consumed it (persist() keeps it)");
  return it->second;
}

int64_t CpuRuntime::last_arena_bytes() const { return state_->last_arena; }
int64_t CpuRuntime::packed_weight_bytes() const { return state_->packed_bytes; }
int64_t CpuRuntime::gemms_grouped() const { return state_->gemms_grouped; }
int CpuRuntime::kernels_compiled() const { return state_->shared->kernels.compiler_invocations(); }

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
  // Everything else lives in the arena.
  std::vector<char> elsewhere(g.size(), 0);  // in-place scatters and their Outputs: in the state
  for (const auto& u : p.in_place) elsewhere[u.scatter] = elsewhere[u.output] = 1;
  for (auto& [id, bytes] : p.once_values) {
    elsewhere[id] = 1;
    ptr[id] = bytes.data();
  }
  auto needs_buffer = [&](NodeId id) { return g.node(id).op != OpKind::Input && !elsewhere[id]; };
  plan::ProgramBuffers now = plan::program_buffers(g, dims, needs_buffer, {}, [&](NodeId id) { return elsewhere[id] != 0; });
  bool fits = p.planned_uses.size() == now.uses.size();
  for (size_t i = 0; fits && i < now.uses.size(); ++i) fits = now.uses[i].bytes <= p.planned_uses[i].bytes;
  if (!fits) {
    if (p.planned_uses.size() == now.uses.size())
      for (size_t i = 0; i < now.uses.size(); ++i) now.uses[i].bytes = std::max(now.uses[i].bytes, p.planned_uses[i].bytes);
    plan::MemoryPlan packed = plan::pack(now.uses);
    p.arena = packed;
    p.arena.offsets.assign(g.size(), plan::kNotInArena);
    for (size_t i = 0; i < now.nodes.size(); ++i) p.arena.offsets[now.nodes[i]] = packed.offsets[i];
    p.planned_uses = std::move(now.uses);
  }
  const plan::MemoryPlan& arena = p.arena;
  if (static_cast<int64_t>(s.arena.size()) < arena.arena_bytes) s.arena.resize(static_cast<size_t>(arena.arena_bytes));
  s.last_arena = arena.arena_bytes;
  for (NodeId i = 0; i < g.size(); ++i)
    if (needs_buffer(i)) ptr[i] = s.arena.data() + arena.offsets[i];
  for (const auto& u : p.in_place) ptr[u.scatter] = ptr[u.output] = ptr[u.state];
  for (const auto& [out, src] : p.direct_outputs) {
    HostTensor& t = p.spare_outputs[out];
    t.dtype = g.node(out).dtype;
    t.shape.clear();
    t.bytes.resize(static_cast<size_t>(product(g.node(out).shape).eval(dims)) * dtype_bytes(t.dtype));
    ptr[src] = t.bytes.data();
  }

  ThreadPool& pool = ThreadPool::global();
  std::vector<int64_t> dim_values;
  auto ptr_inputs = [&](const Node& n) {
    std::vector<std::byte*> ins;
    for (const auto& in : n.inputs) ins.push_back(ptr[in.node]);
    return ins;
  };
  // Run a compiled kernel on `inputs` -> `out`, on the pool unless it is small.
  auto launch = [&](const CompiledKernel& ck, const Node& n, const std::vector<std::byte*>& inputs, std::byte* out) {
    const kernel::Kernel& k = ck.kernel;
    std::vector<void*> buffers(inputs.begin(), inputs.end());
    buffers.push_back(out);
    int32_t error[kernel::kErrorWords] = {};
    buffers.push_back(error);
    dim_values.clear();
    for (const auto& d : k.dim_names) dim_values.push_back(dims.at(d));
    int64_t extent = k.extent.eval(dims);
    int64_t grain = std::max<int64_t>(1, extent / (4 * pool.num_threads()));
    KernelEntry entry = ck.entry;
    // Waking the pool costs microseconds (milliseconds on a loaded machine): small
    // kernels run on this thread.
    if (extent <= grain || k.output_numel.eval(dims) < kSerialElements)
      entry(buffers.data(), dim_values.data(), 0, extent);
    else
      pool.parallel_for(0, extent, grain, [&](int64_t b, int64_t e) { entry(buffers.data(), dim_values.data(), b, e); });
    if (error[0] != 0) fail(kernel::describe_error(k, error, dims, n.user_op));
  };
  // A matmul step's call: operands that are not linear copied first, a persisted weight
  // packed once (OpenBLAS packs inside its own call; a B it declines, such as BF16, falls
  // back to our GEMM). State (a KV cache the program updates) changes every run: never packed.
  auto gemm_step_call = [&](const Step& step) {
    const Node& n = g.node(step.node);
    const GemmLayout& l = *step.gemm;
    const DType b_dtype = g.node(n.inputs[1].node).dtype;
    std::byte* operand[2] = {ptr[n.inputs[0].node], ptr[n.inputs[1].node]};
    const GemmOperand* ops[] = {&l.a, &l.b};
    for (int o = 0; o < 2; ++o) {
      if (!ops[o]->copy) continue;
      const DType dt = o == 0 ? DType::F32 : b_dtype;
      auto& buf = s.scratch[o];
      size_t bytes = static_cast<size_t>(product(ops[o]->copy_view.shape()).eval(dims)) * dtype_bytes(dt);
      if (buf.size() < bytes) buf.resize(bytes);
      launch(*step.copy_kernel[o], n, {operand[o]}, buf.data());
      operand[o] = buf.data();
    }
    GemmCall call = gemm_call(l, dims);
    call.args.a = reinterpret_cast<const float*>(operand[0]) + (l.a.copy ? 0 : l.a.offset.eval(dims));
    call.args.b = operand[1] + (l.b.copy ? 0 : l.b.offset.eval(dims)) * static_cast<int64_t>(dtype_bytes(b_dtype));
    call.args.b_dtype = b_dtype;
    call.args.c = reinterpret_cast<float*>(ptr[step.node]);
    const bool blas = step.kind == StepKind::BlasGemm;
    if (const Node& b_node = g.node(n.inputs[1].node);
        (!blas || !blas_supports(call.args)) && !l.b.copy && call.loops.empty() && b_node.op == OpKind::Input &&
        b_node.persist && !p.is_state[n.inputs[1].node] && p.external_ids[n.inputs[1].node] != kNoNode &&
        gemm_packs_b(call.args))
      call.args.packed_b = s.packed_weight(p.external_ids[n.inputs[1].node], call.args);
    return call;
  };
  std::unordered_map<NodeId, HostTensor> read_out;  // outputs already copied to the user
  for (const Step& step : p.steps) {
    check_deadline();
    if (p.once_ready[step.node]) continue;  // computed on the first run (computed_once)
    const Node& n = g.node(step.node);
    auto step_start = std::chrono::steady_clock::now();
    struct StepTimer {
      State& s;
      const Step& step;
      const Node& n;
      std::chrono::steady_clock::time_point t0;
      ~StepTimer() {
        if (!s.profile_steps) return;
        std::string what = n.op == OpKind::BackendOp ? n.backend->name : std::string(op_name(n.op));
        what += ' ';
        what += to_string(n.shape);
        if (step.kind == StepKind::Kernel) {
          what += ' ';
          what += step.region;
        }
        auto& slot = s.step_time[what];
        slot.first += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        slot.second++;
      }
    } timer{s, step, n, step_start};
    switch (step.kind) {
      case StepKind::Kernel:
        if (p.in_place_output[step.node]) break;  // the scatter wrote the state in place
        if (p.direct_outputs.count(step.node)) break;  // its producer wrote the user's tensor
        if (n.op == OpKind::Output && n.inputs[0].view.is_contiguous() &&
            n.inputs[0].view.shape() == g.node(n.inputs[0].node).shape && g.node(n.inputs[0].node).dtype == n.dtype) {
          // An output that reads its producer whole: copied once, straight to the user's
          // tensor, instead of through the arena.
          HostTensor& t = read_out[step.node];
          // The spare (the run before last's tensor of this output; get_tensor hands out
          // copies): assigning into its capacity avoids a fresh, page-faulting allocation,
          // and the result the user holds stays whole if this run fails.
          t = std::move(p.spare_outputs[step.node]);
          t.dtype = n.dtype;
          t.shape.clear();
          const std::byte* src = ptr[n.inputs[0].node];
          t.bytes.assign(src, src + static_cast<size_t>(product(n.shape).eval(dims)) * dtype_bytes(n.dtype));
          break;
        }
        launch(*step.kernel, n, ptr_inputs(n), ptr[step.node]);
        if (p.computed_once[step.node]) p.once_ready[step.node] = 1;
        break;
      case StepKind::Gemm:
      case StepKind::BlasGemm: {
        if (step.joined) break;  // ran with the sibling before it
        const bool blas = step.kind == StepKind::BlasGemm;
        std::vector<GemmCall> calls;
        for (size_t k = 0; k <= step.siblings; ++k) calls.push_back(gemm_step_call(*(&step + k)));
        // Siblings (one A, packed weights): A packed once, one parallel region.
        if (calls.size() > 1 && std::all_of(calls.begin(), calls.end(), [](const GemmCall& c) {
              return !c.empty && c.loops.empty() && c.args.packed_b != nullptr && c.macs() >= kSerialMacs;
            })) {
          std::vector<GemmArgs> args;
          for (const auto& c : calls) args.push_back(c.args);
          gemm_group(args);
          s.gemms_grouped += static_cast<int64_t>(calls.size()) - 1;
          break;
        }
        for (const GemmCall& call : calls) {
          const bool serial = call.macs() < kSerialMacs;
          call.for_each([&](const GemmArgs& a) {
            if (serial) {
              // Small products run on this thread: inside a (single-chunk) pool task, gemm
              // runs serially.
              pool.parallel_for(0, 1, 1, [&](int64_t, int64_t) { gemm(a); });
            } else if (!blas || !blas_gemm(a)) {
              gemm(a);
            }
          });
        }
        break;
      }
      case StepKind::Custom: {
        // Inputs contiguous: read through a copy kernel where the view is not the buffer.
        std::vector<std::vector<std::byte>> copies(n.inputs.size());
        std::vector<const void*> in_ptrs;
        std::vector<std::vector<int64_t>> in_shapes;
        for (size_t k = 0; k < n.inputs.size(); ++k) {
          const auto& in = n.inputs[k];
          const Node& src = g.node(in.node);
          std::vector<int64_t> shape;
          for (const auto& d : in.view.shape()) shape.push_back(d.eval(dims));
          in_shapes.push_back(shape);
          if (step.custom_copies[k]) {
            copies[k].resize(static_cast<size_t>(product(in.view.shape()).eval(dims)) * dtype_bytes(src.dtype));
            launch(*step.custom_copies[k], n, {ptr[in.node]}, copies[k].data());
            in_ptrs.push_back(copies[k].data());
          } else {
            in_ptrs.push_back(ptr[in.node]);
          }
        }
        std::vector<int64_t> shape;
        for (const auto& d : n.shape) shape.push_back(d.eval(dims));
        const size_t out_bytes = static_cast<size_t>(product(n.shape).eval(dims)) * dtype_bytes(n.dtype);
        if (auto* native = dynamic_cast<const CustomKernel*>(n.custom.get())) {
          native->run_cpu(in_ptrs, in_shapes, ptr[step.node], shape);
          break;
        }
        std::vector<HostTensor> ins;
        for (size_t k = 0; k < n.inputs.size(); ++k) {
          DType dt = g.node(n.inputs[k].node).dtype;
          size_t numel = 1;
          for (auto x : in_shapes[k]) numel *= static_cast<size_t>(x);
          HostTensor t = HostTensor::zeros(dt, numel, in_shapes[k]);
          std::memcpy(t.bytes.data(), in_ptrs[k], t.bytes.size());
          ins.push_back(std::move(t));
        }
        HostTensor r = n.custom->execute_reference(ins, shape, n.dtype);
        LUMINAL_CHECK(r.dtype == n.dtype && r.bytes.size() == out_bytes, "custom op '", n.custom->name(),
                      "' returned the wrong size or dtype");
        std::memcpy(ptr[step.node], r.bytes.data(), out_bytes);
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
    if (p.in_place_output[i]) {  // already in its state, which it reads as
      if (p.external_ids[i] != kNoNode) {
        s.data.erase(p.external_ids[i]);
        s.output_state[p.external_ids[i]] = p.external_ids[n.updates];
      }
      continue;
    }
    if (p.external_ids[i] != kNoNode) s.output_state.erase(p.external_ids[i]);
    HostTensor t;
    if (p.direct_outputs.count(i)) {
      t = std::move(p.spare_outputs[i]);
    } else if (auto it = read_out.find(i); it != read_out.end()) {
      t = std::move(it->second);
    } else {  // one copy out of the arena (into the spare's capacity, no zero fill first)
      t = std::move(p.spare_outputs[i]);
      t.dtype = n.dtype;
      t.shape.clear();
      t.bytes.assign(ptr[i], ptr[i] + static_cast<size_t>(product(n.shape).eval(dims)) * dtype_bytes(n.dtype));
    }
    if (n.updates != kNoNode && !p.in_place_output[i]) results.emplace_back(p.external_ids[n.updates], t);
    if (p.external_ids[i] != kNoNode) {
      // The result it replaces becomes the spare the next run writes into.
      if (auto old = s.data.find(p.external_ids[i]); old != s.data.end())
        p.spare_outputs[i] = std::move(old->second);
      results.emplace_back(p.external_ids[i], std::move(t));
    }
  }
  for (NodeId i = 0; i < g.size(); ++i)
    if (g.node(i).op == OpKind::Input && !g.node(i).persist) s.data.erase(p.external_ids[i]);
  for (auto& [ext, t] : results) {
    s.forget_packed(ext);
    s.data[ext] = std::move(t);
  }
}

}  // namespace luminal::cpu
