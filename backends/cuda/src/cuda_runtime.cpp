#include "luminal_cuda/cuda_runtime.hpp"

#include <algorithm>
#include <filesystem>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

#include "luminal/compile.hpp"
#include "luminal/egraph/egraph.hpp"
#include "luminal/error.hpp"
#include "luminal/kernel/fusion.hpp"
#include "luminal/kernel/kernel.hpp"
#include "luminal/kernel/program_kernels.hpp"
#include "luminal/plan/memory_planner.hpp"
#include "luminal/search/hlir_egraph.hpp"
#include "attention_op.hpp"
#include "luminal_cuda/cublaslt.hpp"
#include "luminal_cuda/kernels.hpp"

namespace luminal::cuda {

// ---- rules, usable without a GPU ----

std::vector<std::string> runtime_rule_files() {
  const std::string dir = std::string(LUMINAL_CUDA_SOURCE_DIR) + "/rules/";
  std::vector<std::string> files{dir + "cuda.egg"};
  // Residual epilogues: on (the 8B decode step 6.57 against 6.70 ms on an H100, session
  // 24); LUMINAL_CUDA_RESIDUAL_EPILOGUE=0 leaves them out, to measure them.
  const char* residual = std::getenv("LUMINAL_CUDA_RESIDUAL_EPILOGUE");
  if (!(residual && std::string_view(residual) == "0")) files.push_back(dir + "cuda_residual.egg");
  // Attention as one kernel: opt-in (LUMINAL_CUDA_ATTENTION=prefill or 1, attention_mode):
  // in the 8B decode step it only tied the matmuls and the softmax (session 24), and its
  // prefill kernel took 66 us a layer against their ~50 at first (session 26).
  if (attention_mode() != AttentionMode::Off) files.push_back(dir + "cuda_attention.egg");
  files.push_back(kernel::fusion_rule_file());
  return files;
}

std::vector<RuleStage> runtime_rule_stages(const Runtime& base, const CompileOptions& o) {
  auto stages = base.Runtime::rule_stages(o);
  stages.front().rulesets.push_back("cuda-matmul");
  stages.push_back({"fuse", {"fuse"}, 20'000, std::min(2.0, o.search_time_limit_.count())});
  return stages;
}

namespace {
bool gemm_dtype(DType dt) { return dt == DType::F32 || dt == DType::F16 || dt == DType::BF16; }
}  // namespace

// The layouts this backend runs: rank 3 or 4 (cuBLASLt's strided batch); outer batch
// axes (rank 5 and more) are not looped here yet.
std::optional<kernel::GemmLayout> cuda_gemm_layout(const ShapeTracker& va, const ShapeTracker& vb) {
  auto l = kernel::gemm_layout(va, vb);
  if (l && !l->outer.empty()) return std::nullopt;
  return l;
}

std::optional<double> runtime_backend_op_cost(std::string_view name, std::span<const int64_t> shape) {
  if (name == "CudaAttention") return attention_cost(shape);
  return std::nullopt;
}

void register_runtime_primitives(egraph::EGraph& eg) {
  using egraph::Value;
  using egraph::ValueKind;
  kernel::register_fusion_primitives(eg);
  register_attention_primitives(eg);
  // (gemm-layout ?va ?vb): the operand views of a matmul-shaped Mul (rank 3 or 4, every
  // axis a linear stride or copied first).
  eg.register_primitive("gemm-layout", [](std::span<const Value> a) -> std::optional<Value> {
    if (a.size() != 2 || a[0].kind() != ValueKind::ExprList || a[1].kind() != ValueKind::ExprList) return std::nullopt;
    return Value::boolean(cuda_gemm_layout(search::decode_view(a[0]), search::decode_view(a[1])).has_value());
  });
  // (gemm-float ?dtype): F32, F16 or BF16, the dtypes cuBLASLt and our GEMV take.
  eg.register_primitive("gemm-float", [](std::span<const Value> a) -> std::optional<Value> {
    if (a.size() != 1 || a[0].kind() != ValueKind::String) return std::nullopt;
    const std::string& s = a[0].as_string();
    return Value::boolean(s == "F32" || s == "F16" || s == "BF16");
  });
}

namespace {
// NVRTC options of emitted kernels. The kernel IR rounds every primitive's result to its
// dtype, as the reference and the CPU backend (-ffp-contract=off) do; NVRTC's default FMA
// contraction would fuse `x - mean * r` into one rounding, so layer_norm of a constant row
// gave -1.9e-5 on the H200 where every other runtime gives exactly 0. Hand-written
// kernels call fmaf where they mean it, and keep the default.
const std::vector<std::string> kEmittedKernelOptions{"--fmad=false"};
}  // namespace

KernelSource region_kernel_source(const std::string& region, const std::string& name) {
  auto k = kernel::lower(kernel::parse_region(region));
  LUMINAL_CHECK(k.has_value(), "cuda: a region cannot be lowered to a kernel: ", region.substr(0, 300));
  return {name, kernel::emit_cuda(*k, name), kEmittedKernelOptions};
}

namespace {
using kernel::GemmOperand;
// Our GEMV or cuBLASLt (rules/cuda.egg); the "Add" forms carry a third input, a residual
// added in the epilogue.
bool is_matmul(const Node& n) {
  if (n.op != OpKind::BackendOp) return false;
  const std::string& name = n.backend->name;
  return name == "CudaGemv" || name == "CudaCublasLt" || name == "CudaGemvAdd" || name == "CudaCublasLtAdd";
}
bool is_gemv(const Node& n) { return n.backend->name == "CudaGemv" || n.backend->name == "CudaGemvAdd"; }
// F32 for a matmul's B operand held in F16/BF16 under an F32 product (the half-weights
// rule): the GEMV reads it as it is; anything else reads an F32 copy. nullopt otherwise.
std::optional<DType> widened_weight(const Node& matmul, int operand, DType operand_dtype) {
  if (operand == 1 && matmul.dtype == DType::F32 && is_half_float(operand_dtype))
    return DType::F32;
  return std::nullopt;
}

// GEMVs that read the same x (an attention block's q, k and v projections; an MLP's gate
// and up) can run as one launch (launch_gemv_group): one kernel streams all their weights,
// so the narrow ones (k and v, 1024 outputs) stop paying a launch and a short grid's tail
// each. kernel::adjoin_siblings puts them in a row. Siblings read the same x the same way:
// one node, and one A operand (the views differ in the broadcast n axis, which is each
// one's own width).
bool gemv_siblings(const Node& a, const Node& b) {
  if (a.op != OpKind::BackendOp || b.op != OpKind::BackendOp || a.backend->name != "CudaGemv" ||
      b.backend->name != "CudaGemv" || a.dtype != b.dtype || a.inputs.size() != 2 || b.inputs.size() != 2 ||
      a.inputs[0].node != b.inputs[0].node)
    return false;
  const auto la = cuda_gemm_layout(a.inputs[0].view, a.inputs[1].view);
  const auto lb = cuda_gemm_layout(b.inputs[0].view, b.inputs[1].view);
  if (!la || !lb) return false;
  const GemmOperand &xa = la->a, &xb = lb->a;
  return la->m == lb->m && la->k == lb->k && la->batch == lb->batch && la->outer.empty() && lb->outer.empty() &&
         !xa.copy && !xb.copy && xa.offset == xb.offset && xa.row == xb.row && xa.col == xb.col &&
         xa.batch == xb.batch;
}
}  // namespace

std::vector<std::string> program_regions(const luminal::Graph& g) {
  std::vector<std::string> regions;
  for (const Node& n : g.nodes()) {
    if (auto r = kernel::node_region_text(g, n, "cuda")) {
      regions.push_back(std::move(*r));
    } else if (is_matmul(n)) {
      auto l = cuda_gemm_layout(n.inputs[0].view, n.inputs[1].view);
      if (!l) continue;  // load_program reports it
      const kernel::GemmOperand* ops[] = {&l->a, &l->b};
      for (int o = 0; o < 2; ++o) {
        const Node& src = g.node(n.inputs[o].node);
        const auto widen = widened_weight(n, o, src.dtype);
        if (ops[o]->copy || widen)
          regions.push_back(kernel::copy_region_text(src.dtype, src.shape, ops[o]->copy_view, "cuda", widen));
      }
    }
  }
  return regions;
}

namespace {

std::string kernel_name(const std::string& region) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "lm_%016zx", std::hash<std::string>{}(region));
  return buf;
}

// Kernels of one translation unit; NVRTC's fixed cost is paid once for them.
constexpr size_t kKernelsPerUnit = 8;

}  // namespace

// ---- the state shared by a runtime and its fresh() copies ----

struct CudaRuntime::Shared {
  // Declared first, destroyed last: everything below needs the context.
  std::unique_ptr<Context> context;
  std::unique_ptr<Stream> stream;
  std::unique_ptr<ModuleCache> modules;
  std::unique_ptr<CublasLt> lt;  // made on first use

  struct Compiled {
    std::string name;
    kernel::Kernel kernel;
    std::vector<Expression> dims_entries;        // kernel::cuda_dims_entries(kernel)
    int vector_width = 1;                        // kernel::cuda_vector_width(kernel)
    int row_chunk = 1;                           // kernel::cuda_row_chunk_width(kernel)
    std::string unit_key;                        // the compiled unit holding it (ModuleCache::compile_kernels)
    api::CUfunction fn = nullptr;
    std::string error;  // lowering failed
  };
  std::mutex mutex;       // guards `kernels`
  std::mutex load_mutex;  // guards loading a Compiled's function
  std::unordered_map<std::string, std::shared_ptr<Compiled>> kernels;  // by region text

  explicit Shared(int device) {
    context = std::make_unique<Context>(device);  // throws "CUDA backend unavailable: ..." without a GPU
    stream = std::make_unique<Stream>();
    modules = std::make_unique<ModuleCache>(context->info().arch());
  }
  ~Shared() {
    // Kernels and the library go before the modules and the context they live in.
    kernels.clear();
    lt.reset();
    if (stream) {
      api::driver_table().cuStreamSynchronize(stream->get());
    }
  }

  CublasLt& cublaslt() {
    if (!lt) lt = std::make_unique<CublasLt>(size_t{32} << 20, static_cast<size_t>(context->info().l2_bytes));
    return *lt;
  }

  // Lower, emit and compile every region not seen yet (kernels compiled before, here or by
  // another process, are found in the module cache), the new ones kKernelsPerUnit per
  // translation unit, units in parallel. A unit that fails is left for get(), which
  // compiles its kernels one by one so the error names the region.
  void compile(const std::vector<std::string>& regions) {
    std::vector<std::shared_ptr<Compiled>> fresh;
    {
      std::lock_guard lock(mutex);
      for (const auto& r : regions) {
        if (kernels.count(r)) continue;
        auto c = std::make_shared<Compiled>();
        c->name = kernel_name(r);
        try {
          auto k = kernel::lower(kernel::parse_region(r));
          if (!k) c->error = "the region cannot be lowered to a kernel";
          else {
            c->kernel = std::move(*k);
            c->dims_entries = kernel::cuda_dims_entries(c->kernel);
            c->vector_width = kernel::cuda_vector_width(c->kernel);
            c->row_chunk = kernel::cuda_row_chunk_width(c->kernel);
          }
        } catch (const std::exception& e) {
          c->error = e.what();
        }
        kernels.emplace(r, c);
        if (c->error.empty()) fresh.push_back(c);
      }
    }
    if (fresh.empty()) return;
    std::vector<KernelSource> sources;
    sources.reserve(fresh.size());
    for (const auto& c : fresh)
      sources.push_back(KernelSource{c->name, kernel::emit_cuda(c->kernel, c->name), kEmittedKernelOptions});
    std::vector<std::string> units = modules->compile_kernels(sources, kKernelsPerUnit);
    std::lock_guard lock(mutex);
    for (size_t i = 0; i < fresh.size(); ++i) fresh[i]->unit_key = std::move(units[i]);
  }

  // The loaded kernel of a region, compiling it now if needed. Throws naming the region
  // when it cannot be lowered or compiled.
  std::shared_ptr<Compiled> get(const std::string& region) {
    std::shared_ptr<Compiled> c;
    {
      std::lock_guard lock(mutex);
      if (auto it = kernels.find(region); it != kernels.end()) c = it->second;
    }
    if (!c) {
      compile({region});
      std::lock_guard lock(mutex);
      c = kernels.at(region);
    }
    LUMINAL_CHECK(c->error.empty(), "cuda: region cannot be a kernel (", c->error, "): ", region.substr(0, 300));
    std::lock_guard load(load_mutex);
    if (c->fn) return c;
    try {
      LUMINAL_CHECK(!c->unit_key.empty(), "no translation unit");
      c->fn = modules->function(c->unit_key, c->name);
    } catch (const DeviceLost&) {
      throw;
    } catch (const Error&) {
      // The unit failed (or one of its other kernels did): compile this kernel alone, so
      // a failure names this region and NVRTC's log is about it.
      const KernelSource alone{c->name, kernel::emit_cuda(c->kernel, c->name), kEmittedKernelOptions};
      try {
        c->fn = modules->function(alone, c->name);
      } catch (const Error& e) {
        fail("cuda: kernel for region ", region.substr(0, 300), " failed to compile: ", e.what());
      }
      c->unit_key = cache_key(alone, modules->arch());
    }
    return c;
  }
};

namespace {

using kernel::GemmLayout;
using kernel::GemmOperand;
using Compiled = CudaRuntime::Shared::Compiled;

// Arena offsets are multiples of this (cuBLASLt's default pointer alignment).
constexpr int64_t kAlignment = 256;
// An elementwise launch of more blocks than this many waves of resident threads gives each
// thread four elements instead of one (Resolver::add_kernel).
constexpr int64_t kElementwiseWaves = 2;
// get_tensor reads up to this many bytes through a page-locked staging buffer.
constexpr size_t kPinnedStagingLimit = size_t(64) << 20;

enum class StepKind { Kernel, Gemv, CublasLt, Attention, Custom };
struct Step {
  StepKind kind = StepKind::Kernel;
  NodeId node = 0;
  std::shared_ptr<Compiled> kernel;                  // Kernel
  std::optional<GemmLayout> gemm;                    // Gemv / CublasLt
  std::optional<AttentionLayout> attention;          // Attention
  std::string copy_region[2];                        // matmul operands: copy through copy_view
  std::optional<DType> weight_dtype;                 // B's F16/BF16 dtype under an F32 product
  std::vector<std::string> custom_copy_regions;      // Custom: per input, "" when read directly
};

// A device tensor by external id: the user's input, a persisted weight or cache, or an
// output. The buffer is kept when the data is consumed, so its pointer (captured in CUDA
// graphs) stays stable from run to run.
struct DeviceTensor {
  DType dtype = DType::F32;
  size_t numel = 0;
  std::vector<int64_t> shape;
  DeviceBuffer buffer;
  DevicePtr external = 0;  // bind_device_pointer, or the state an in-place update Output aliases
  size_t external_bytes = 0;
  bool state_alias = false;  // `external` is the state's buffer, set by the runtime (not the user)
  bool valid = false;
  DevicePtr ptr() const { return external ? external : buffer.ptr(); }
  size_t capacity() const { return external ? external_bytes : buffer.bytes(); }
  // Room for `bytes`; a new buffer (a new pointer) only when it grows, then with a
  // quarter of headroom, so that a length growing by one per decode step does not
  // allocate every step. The first allocation is exact (weights).
  void reserve(size_t bytes) {
    if (external) {
      LUMINAL_CHECK(bytes <= external_bytes, "cuda: a bound device pointer holds ", external_bytes, " bytes but ", bytes,
                    " are needed");
      return;
    }
    if (buffer.ptr() == 0) buffer = DeviceBuffer(std::max<size_t>(bytes, 16));
    else if (buffer.bytes() < bytes) {
      const size_t grown = std::max(bytes, buffer.bytes() + buffer.bytes() / 4);
      buffer = DeviceBuffer();  // freed first: the peak is the new size, not both
      buffer = DeviceBuffer(grown);
    }
  }
};

// One operation of a resolved run: enqueued on the stream, or (a custom op's host
// fallback) run on the host after the stream drains.
struct Op {
  Op(std::function<void(StreamHandle)> e, bool h) : enqueue(std::move(e)), host(h) {}
  std::function<void(StreamHandle)> enqueue;
  bool host = false;
  std::string label;  // what it runs (LUMINAL_CUDA_PROFILE)
};

// LUMINAL_CUDA_PROFILE=1: runs go eagerly (no graphs), each op timed with events; the
// totals by label print on stderr when the runtime goes away, longest first.
bool env_on(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::string_view(v) != "0";
}
bool profile_from_env() { return env_on("LUMINAL_CUDA_PROFILE"); }
struct OpProfile {
  double ms = 0;
  int64_t calls = 0;
};

// A value a resolution's launches were built from: an expression over the dims and what
// it evaluated to; for a grid, the block count launched (see launch_blocks); for a size a
// kernel reads from the dims buffer, only whether it is positive.
// Exact: the same value; Grid: launch_blocks' headroom holds it; Positive: the same sign;
// Band: the same power-of-two band (floor of log2, below 1 as 1).
enum class ProbeKind : uint8_t { Exact, Grid, Positive, Band };
int band_of(int64_t v) { return std::bit_width(static_cast<uint64_t>(std::max<int64_t>(v, 1))) - 1; }
struct Probe {
  Expression expr;
  int64_t value = 0;
  ProbeKind kind = ProbeKind::Exact;
};

// The blocks launched for a grid that depends on the dims: a quarter of headroom, rounded
// up to 2^k or 3 * 2^k, so that a length growing by one (a decode step) keeps its launches
// for a while, also when it starts at a power of two (a 512-token prompt). Every emitted
// kernel guards its rows against the dims it reads from the dims buffer, so the extra
// blocks leave at once.
int64_t launch_blocks(int64_t grid) {
  if (grid <= 2) return grid;
  const int64_t want = grid + grid / 4;
  int64_t p = 1;
  while (p < want) p *= 2;
  return p / 4 * 3 >= want ? p / 4 * 3 : p;
}
// Whether `launched` blocks (launch_blocks of an earlier grid) serve a grid of `grid`:
// they cover it, and no more than four times over (a much shorter run resolves anew).
bool blocks_serve(int64_t launched, int64_t grid) {
  return grid <= launched && launched <= 4 * std::max<int64_t>(grid, 1) + 4;
}

// A program resolved for one set of launches and pointers: every launch with its
// arguments, the dims buffer the kernels read, and the CUDA graph once captured. Other
// dims whose probes evaluate the same (a decode step at the next position, in most steps)
// reuse it: only the dims buffer is written again.
struct Resolved {
  std::vector<DevicePtr> bound;  // the pointers it was resolved with
  uint64_t arena_version = 0;
  std::vector<Op> ops;
  bool host_ops = false;
  std::vector<Probe> probes;            // every dims-dependent value its launches hold
  std::vector<Expression> dim_exprs;    // the dims buffer: these expressions' values, in order
  std::vector<int64_t> dims_key;        // the dims the buffer holds now
  DeviceBuffer dims;         // the values of dim_exprs (each kernel's dims, small matmuls' sizes)
  DeviceBuffer scratch[2];   // matmul operand copies (the largest step's)
  std::vector<DeviceBuffer> custom_scratch;
  uint64_t id = 0;                         // unique in its plan: what the plan's live graph holds
  std::unique_ptr<CapturedGraph> capture;  // its launches, captured (to update or instantiate from)
  std::unique_ptr<GraphExec> own;          // its own executable graph (a resolution run again)
  int runs = 0;
  uint64_t last_used = 0;  // for evicting the least recently used resolution

  // Whether these launches are right for `dims` and these pointers as they stand.
  bool serves(const DimMap& dims, const std::vector<DevicePtr>& pointers) const {
    if (pointers != bound) return false;
    for (const Probe& pr : probes) {
      const int64_t v = pr.expr.eval(dims);
      if (pr.kind == ProbeKind::Grid) {
        if (!blocks_serve(pr.value, v)) return false;
        continue;
      }
      const int64_t seen = pr.kind == ProbeKind::Positive ? v > 0 : pr.kind == ProbeKind::Band ? band_of(v) : v;
      if (seen != pr.value) return false;
    }
    return true;
  }
  // The dims buffer for `dims` (stream-ordered after the runs before).
  void write_dims(const std::vector<int64_t>& key, const DimMap& dims, StreamHandle stream) {
    if (key == dims_key) return;
    std::vector<int64_t> values;
    values.reserve(dim_exprs.size());
    for (const auto& e : dim_exprs) values.push_back(e.eval(dims));
    if (!values.empty()) this->dims.upload(values.data(), values.size() * sizeof(int64_t), stream);
    dims_key = key;
  }
};

// A matmul whose n or k follows the dims (attention over a cache that grows by a position
// per decode step) and whose m is small runs as the small matmul kernel, its sizes and
// strides read from the dims buffer: its launch holds while they change, so a decode step
// reuses the last step's resolution and replays its graph instead of resolving the whole
// program again and updating the graph (18 ms a step on the 8B model, more than its
// kernels). cuBLASLt and the GEMV take their sizes as arguments.
// How many bytes of the next GEMV's weights a GEMV asks the L2 for as it finishes
// (kernels/gemv.cu, prefetch_next): 40% of the L2, so what the next one reads first is
// there when it starts and the short kernels between do not evict it.
// LUMINAL_GEMV_PREFETCH_NEXT_MB sets it (0: off), to measure it.
int64_t gemv_prefetch_next_bytes(int l2_bytes) {
  static const int64_t from_env = [] {
    const char* env = std::getenv("LUMINAL_GEMV_PREFETCH_NEXT_MB");
    if (!env) return int64_t{-1};
    char* end = nullptr;
    const long mb = std::strtol(env, &end, 10);
    LUMINAL_CHECK(end != env && *end == '\0' && mb >= 0 && mb <= 1024,
                  "LUMINAL_GEMV_PREFETCH_NEXT_MB must be a number of MiB from 0 to 1024, got '", env, "'");
    return int64_t{mb} << 20;
  }();
  return from_env >= 0 ? from_env : int64_t{l2_bytes} * 2 / 5;
}

// A GEMV launch of a resolution and the weights it reads in place (0: a packed copy).
struct GemvLaunch {
  std::shared_ptr<GemvArgs> single;
  std::shared_ptr<GemvGroupArgs> group;
  DevicePtr weight = 0;
  int64_t weight_bytes = 0;
};

// Each GEMV launch prefetches the start of the next one's weights (capped), once all
// launches of the resolution are known.
void link_gemv_prefetches(std::vector<GemvLaunch>& launches, int64_t cap) {
  if (cap <= 0) return;
  for (size_t i = 0; i + 1 < launches.size(); ++i) {
    GemvLaunch& next = launches[i + 1];
    if (next.group) {  // its first member, which its first blocks read
      const GemvGroupArgs& g = *next.group;
      next.weight = g.w[0];
      next.weight_bytes = int64_t{g.N[0]} * g.K * static_cast<int64_t>(dtype_bytes(g.weight_dtype.value_or(g.dtype)));
    }
    if (!next.weight) continue;
    const int64_t bytes = std::min(next.weight_bytes, cap);
    if (launches[i].single) {
      launches[i].single->next = next.weight;
      launches[i].single->next_bytes = bytes;
    } else {
      launches[i].group->next = next.weight;
      launches[i].group->next_bytes = bytes;
    }
  }
}

bool runs_as_small_matmul(const Step& step, const GemmLayout& l, DType dt, const DimMap& dims) {
  if (l.n.is_constant() && l.k.is_constant()) return false;
  if (step.weight_dtype || l.a.copy || l.b.copy || !l.outer.empty() || !gemm_dtype(dt)) return false;
  const int64_t m = l.m.eval(dims);
  return m >= 1 && m <= kSmallMatmulMaxRows && l.n.eval(dims) > 0 && l.k.eval(dims) > 0 && l.batch.eval(dims) > 0;
}

// A matmul operand whose view is no linear stride for every dims (a reshape merging a
// run-time length: attention's [kv, group * s, d] read as [s, kv * group * d] for the
// output projection) may be one at the dims of this run (s = 1 at a decode step): then
// the launch reads it in place instead of copying it first. Returns that operand, its
// strides constant, and the dims its view depends on (the resolution holds only while
// they keep their values); nullopt when it is not linear here either, or when its view
// depends on a dim the matmul's sizes do not (pinning it would cost the reuse of this
// resolution across decode steps, which only the sizes' dims already cost).
struct OperandAtDims {
  GemmOperand operand;
  std::vector<std::string> pinned;
};
std::optional<OperandAtDims> operand_at_dims(const GemmLayout& layout, const ShapeTracker& va, const ShapeTracker& vb,
                                             int which, const DimMap& dims) {
  std::set<std::string> size_dims;
  for (const Expression* e : {&layout.m, &layout.n, &layout.k, &layout.batch})
    for (auto& name : e->variables()) size_dims.insert(name);
  std::map<std::string, Expression, std::less<>> values;
  std::set<std::string> used;
  auto note = [&](const Expression& e) {
    for (auto& name : e.variables())
      if (auto it = dims.find(name); it != dims.end()) {
        values.emplace(name, Expression(it->second));
        used.insert(name);
      }
  };
  const ShapeTracker& mine = which == 0 ? va : vb;
  for (const ViewDim& d : mine.dims()) {
    note(d.size);
    note(d.offset);
    note(d.valid);
  }
  note(mine.base_offset());
  note(mine.base_valid());
  for (const ShapeTracker* v : {&va, &vb})
    for (const ViewDim& d : v->dims()) note(d.size);
  auto at = [&](const ShapeTracker& v) {
    std::vector<ViewDim> out;
    for (const ViewDim& d : v.dims())
      out.push_back({d.size.substitute(values), d.offset.substitute(values), d.valid.substitute(values)});
    return ShapeTracker::from_parts(std::move(out), v.base_offset().substitute(values), v.base_valid().substitute(values));
  };
  for (const auto& name : used)
    if (!size_dims.count(name)) return std::nullopt;
  auto l = cuda_gemm_layout(at(va), at(vb));
  if (!l) return std::nullopt;
  const GemmOperand& o = which == 0 ? l->a : l->b;
  if (o.copy) return std::nullopt;
  return OperandAtDims{o, {used.begin(), used.end()}};
}

// Resolutions kept per plan: decode steps at ever new positions must not pile up.
constexpr size_t kMaxResolutions = 16;

struct ProgramPlan {
  luminal::Graph graph;
  std::vector<NodeId> external_ids;
  std::unordered_map<NodeId, NodeId> program_of;  // external id -> program node
  // Constants (scalars) are computed once, at load, into `constants`; their steps never
  // launch again. constant_offset[node] is its place there, -1 for other nodes.
  DeviceBuffer constants;
  std::vector<int64_t> constant_offset;
  // An Output that reads its whole producer as it lies (contiguous, same shape and dtype)
  // lets the producer write straight into the output buffer: no copy kernel. Per node:
  // the producer an Output may take over, kNoNode otherwise (decided again per run, from
  // the pointers: see run()).
  std::vector<NodeId> output_producer;
  std::vector<Step> steps;
  std::vector<std::string> dim_names;  // every dim the program mentions, sorted
  std::vector<plan::BufferUse> planned_uses;
  plan::MemoryPlan arena;
  uint64_t arena_version = 0;
  std::unordered_map<NodeId, DeviceTensor> private_outputs;  // Outputs without an external id
  DeviceBuffer errors;                                       // one error record (kErrorWords int32) per step
  // State updates run in place (KV-cache appends): the scatter writes into the state's
  // buffer and its update Output is void (kernel::in_place_update).
  std::vector<kernel::InPlaceUpdate> in_place;
  std::vector<char> in_place_output;  // per node
  std::map<std::vector<int64_t>, std::shared_ptr<Resolved>> resolved;  // by dims (shared by dims it serves)
  std::shared_ptr<Resolved> latest;  // the last run's: the first to try for new dims
  uint64_t clock = 0;
  uint64_t next_resolution_id = 0;
  int64_t runs = 0;
  // The executable graph that new resolutions update in place (cuGraphExecUpdate), and
  // which resolution's launches it runs now.
  std::unique_ptr<GraphExec> live;
  uint64_t live_holds = 0;
  int updates_refused = 0, updates_done = 0;  // see kMaxUpdateFailures
  // Sizes by dims, evaluated once: a replayed decode step costs no expression evaluation.
  struct DimsInfo {
    bool computed = false;
    std::vector<int64_t> input_numel;  // per Input node, in node order
    std::vector<size_t> output_bytes;  // per Output node, in node order
    uint64_t fits_version = ~uint64_t(0);  // the arena plan version these dims were seen to fit
  };
  std::map<std::vector<int64_t>, DimsInfo> dims_info;
  // Element counts of the Input and Output nodes, in node order, and the arena buffers'
  // byte counts in the planner's order: built once, evaluated for each new dims (a decode
  // step's), so that a step whose buffers fit the plan costs no planner run.
  std::vector<Expression> input_numel, output_numel, use_bytes;
};

bool env_off(const char* name) {
  const char* v = std::getenv(name);
  return v && (std::strcmp(v, "0") == 0 || std::strcmp(v, "off") == 0);
}
bool graphs_from_env() { return !env_off("LUMINAL_CUDA_GRAPHS"); }
bool graph_updates_from_env() { return !env_off("LUMINAL_CUDA_GRAPH_UPDATE"); }

// A plan whose new resolutions often change the graph's topology (each refused update is
// answered by an instantiation, dearer than launching eagerly) stops updating once
// updates were refused this many times and more than a fifth of the time.
constexpr int kMaxUpdateFailures = 4;
bool updates_worth_trying(int refused, int done) { return refused < kMaxUpdateFailures || refused * 4 <= done; }

// A cuBLASLt layout for a [rows, cols] operand with these strides, or nullopt when it
// needs a packed copy first.
std::optional<MatrixLayout> lt_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, int64_t bs, int64_t batch) {
  if (batch > 1 && bs <= 0) return std::nullopt;  // a broadcast batch is copied
  MatrixLayout l;
  l.batch_stride = batch > 1 ? bs : 0;
  if (cs == 1 && (rows == 1 || rs >= cols)) {
    l.order = Order::RowMajor;
    l.ld = rows == 1 ? cols : rs;
    return l;
  }
  if (rs == 1 && (cols == 1 || cs >= rows)) {
    l.order = Order::ColMajor;
    l.ld = cols == 1 ? rows : cs;
    return l;
  }
  return std::nullopt;
}

void launch_kernel(api::CUfunction fn, unsigned grid, unsigned block, const std::vector<DevicePtr>& args,
                   StreamHandle stream) {
  std::vector<void*> params;
  params.reserve(args.size());
  for (const DevicePtr& a : args) params.push_back(const_cast<DevicePtr*>(&a));
  cuda::launch_kernel(fn, grid, 1u, 1u, block, 0u, stream, params.data());
}

const char* kernel_error_text(int32_t code) {
  switch (code) {
    case 1: return "integer modulo by zero";
    case 2: return "gather index out of range";
    case 3: return "scatter index out of range";
    default: return "kernel error";
  }
}

}  // namespace

struct CudaRuntime::State {
  std::shared_ptr<Shared> shared;  // first: destroyed last (the buffers below need its context)
  std::vector<ProgramPlan> slots;
  std::unordered_map<NodeId, DeviceTensor> data;  // by external id
  DeviceBuffer arena;
  uint64_t arena_version = 0;
  int64_t last_arena = 0;
  bool profiling = profile_from_env();
  bool graphs = graphs_from_env() && !profiling;
  bool graph_updates = graph_updates_from_env();
  // profile's runs_per_trial: every run of a trial but the last returns once enqueued (no
  // wait for the device, no read of the error records), so the runs queue back to back.
  // They are the same program on the same inputs and dims, so the last run's records stand
  // for them: a kernel's error recurs there.
  bool defer_wait = false;
  int captured = 0, replays = 0, updated = 0, eager_runs = 0;
  int relaunched = 0;  // new resolutions instantiated because their kernels differ from the live graph's
  int resolutions = 0, reused = 0;  // runs resolved anew; runs of new dims that reused a resolution
  int gemvs_grouped = 0;  // GEMV steps that joined the launch of the one before
  PinnedBuffer staging;   // get_tensor's page-locked buffer for reads up to kPinnedStagingLimit
  // Host time per run phase (LUMINAL_CUDA_HOST_TIMES=1 prints it when the runtime goes away).
  enum Phase { kPrepare, kResolve, kGraph, kLaunch, kWait, kPhases };
  double host_ms[kPhases] = {};
  int64_t timed_runs = 0;
  // The same for runs that neither resolved anew nor captured or updated a graph (a decode
  // step in its steady state): what every token pays.
  double steady_ms[kPhases] = {};
  int64_t steady_runs = 0;
  bool print_host_times = env_on("LUMINAL_CUDA_HOST_TIMES");
  std::string last_update_refusal;  // why the last refused update was refused
  std::map<std::string, OpProfile> op_profile;
  int64_t profiled_runs = 0;

  ~State() {
    // Buffers are freed below; nothing may still be running on them.
    if (shared && shared->stream) api::driver_table().cuStreamSynchronize(shared->stream->get());
    if (profiling && !op_profile.empty()) print_profile();
    if (print_host_times && timed_runs > 0) {
      std::fprintf(stderr,
                   "cuda host: %lld runs, ms per run: %s; %d resolutions, %d reused for new dims, %d graphs "
                   "instantiated (%d of them for other kernels than the live graph's), %d updated, %d replays, %d eager\n",
                   static_cast<long long>(timed_runs), phases_per_run(host_ms, timed_runs).c_str(), resolutions, reused,
                   captured, relaunched, updated, replays, eager_runs);
      if (steady_runs > 0)
        std::fprintf(stderr, "cuda host: %lld steady runs (no new resolution or graph), ms per run: %s\n",
                     static_cast<long long>(steady_runs), phases_per_run(steady_ms, steady_runs).c_str());
    }
  }

  // "prepare 0.123, resolve ..., wait ...": each phase's milliseconds per run.
  static std::string phases_per_run(const double (&ms)[kPhases], int64_t runs) {
    const double n = static_cast<double>(runs);
    char text[160];
    std::snprintf(text, sizeof text, "prepare %.3f, resolve %.3f, graph capture/update %.3f, launch %.3f, wait %.3f",
                  ms[kPrepare] / n, ms[kResolve] / n, ms[kGraph] / n, ms[kLaunch] / n, ms[kWait] / n);
    return text;
  }

  void print_profile() const {
    std::vector<std::pair<std::string, OpProfile>> rows(op_profile.begin(), op_profile.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
    double total = 0;
    for (const auto& r : rows) total += r.second.ms;
    std::fprintf(stderr, "cuda profile: %lld runs, %.3f ms of ops per run\n", static_cast<long long>(profiled_runs),
                 total / std::max<int64_t>(1, profiled_runs));
    std::fprintf(stderr, "%10s %7s %8s  %s\n", "ms/run", "share", "calls", "op");
    for (size_t k = 0; k < rows.size() && k < 40; ++k)
      std::fprintf(stderr, "%10.4f %6.1f%% %8lld  %s\n", rows[k].second.ms / std::max<int64_t>(1, profiled_runs),
                   100.0 * rows[k].second.ms / std::max(total, 1e-12), static_cast<long long>(rows[k].second.calls),
                   rows[k].first.c_str());
  }

  const Node* find_io(NodeId ext) const {
    for (const auto& p : slots)
      if (auto it = p.program_of.find(ext); it != p.program_of.end()) return &p.graph.node(it->second);
    return nullptr;
  }
  StreamHandle stream() const { return shared->stream->get(); }
};

CudaRuntime::CudaRuntime(int device) : CudaRuntime(std::make_shared<Shared>(device)) {}
CudaRuntime::CudaRuntime(std::shared_ptr<Shared> shared) : state_(std::make_unique<State>()) {
  LUMINAL_ASSERT(shared != nullptr, "cuda runtime without shared state");
  state_->shared = std::move(shared);
}
CudaRuntime::~CudaRuntime() = default;
CudaRuntime::CudaRuntime(CudaRuntime&&) noexcept = default;
CudaRuntime& CudaRuntime::operator=(CudaRuntime&&) noexcept = default;

std::vector<std::string> CudaRuntime::profiling_worker() const {
  if (const char* env = std::getenv("LUMINAL_CUDA_PROFILE_WORKER")) {
    if (!*env || std::string(env) == "0") return {};
    return {env};
  }
#ifdef LUMINAL_CUDA_PROFILE_WORKER_PATH
  std::error_code ec;
  if (std::filesystem::exists(LUMINAL_CUDA_PROFILE_WORKER_PATH, ec)) return {LUMINAL_CUDA_PROFILE_WORKER_PATH};
#endif
  return {};
}

std::unique_ptr<Runtime> CudaRuntime::fresh() const {
  auto rt = std::make_unique<CudaRuntime>(state_->shared);
  rt->state_->graphs = state_->graphs;
  rt->state_->graph_updates = state_->graph_updates;
  return rt;
}

void CudaRuntime::set_graphs_enabled(bool enabled) { state_->graphs = enabled; }
bool CudaRuntime::graphs_enabled() const { return state_->graphs; }
int64_t CudaRuntime::last_arena_bytes() const { return state_->last_arena; }
int CudaRuntime::graphs_captured() const { return state_->captured; }
int CudaRuntime::graph_replays() const { return state_->replays; }
int CudaRuntime::graphs_updated() const { return state_->updated; }
int CudaRuntime::eager_runs() const { return state_->eager_runs; }
int CudaRuntime::resolutions() const { return state_->resolutions; }
int CudaRuntime::resolutions_reused() const { return state_->reused; }
int CudaRuntime::gemvs_grouped() const { return state_->gemvs_grouped; }
void CudaRuntime::set_graph_updates_enabled(bool enabled) { state_->graph_updates = enabled; }
bool CudaRuntime::graph_updates_enabled() const { return state_->graph_updates; }
int CudaRuntime::kernels_compiled() const { return state_->shared->modules->stats().compiled; }
int CudaRuntime::steps_running(std::string_view backend_op) const {
  int count = 0;
  for (const ProgramPlan& p : state_->slots)
    for (const Step& step : p.steps) {
      const Node& n = p.graph.node(step.node);
      count += n.op == OpKind::BackendOp && n.backend->name == backend_op;
    }
  return count;
}
const DeviceInfo& CudaRuntime::device_info() const { return state_->shared->context->info(); }

void CudaRuntime::prepare(std::span<const luminal::Graph* const> programs) {
  state_->shared->context->make_current();
  std::vector<std::string> regions;
  for (const luminal::Graph* g : programs) {
    try {
      std::vector<NodeId> renumbered;
      const luminal::Graph fused = kernel::fuse_program(*g, renumbered);  // as load_program will run it
      for (auto& r : program_regions(fused)) regions.push_back(std::move(r));
    } catch (const Error&) {
      // This program's error is thrown again from its load_program.
    }
  }
  state_->shared->compile(regions);
}

namespace {

// Every scalar Constant's kernel runs once now, into the plan's constant buffer, instead
// of at every run (a decode step launched a few each).
void materialise_constants(ProgramPlan& p, StreamHandle stream) {
  p.constant_offset.assign(p.graph.size(), -1);
  int64_t bytes = 0;
  for (const Step& step : p.steps) {
    const Node& n = p.graph.node(step.node);
    if (n.op != OpKind::Constant || step.kind != StepKind::Kernel || !step.kernel) continue;
    const auto numel = product(n.shape).as_constant();
    if (!numel || !step.kernel->kernel.dim_names.empty() || !step.kernel->kernel.grid_x.as_constant()) continue;
    p.constant_offset[step.node] = bytes;
    bytes += (std::max<int64_t>(1, *numel * static_cast<int64_t>(dtype_bytes(n.dtype))) + kAlignment - 1) / kAlignment *
             kAlignment;
  }
  if (bytes == 0) return;
  p.constants = DeviceBuffer(static_cast<size_t>(bytes));
  for (size_t si = 0; si < p.steps.size(); ++si) {
    const Step& step = p.steps[si];
    if (p.constant_offset[step.node] < 0) continue;
    const kernel::Kernel& k = step.kernel->kernel;
    const int64_t grid = *k.grid_x.as_constant();
    if (grid <= 0) continue;
    // Arguments: the output, the step's error record, the dims (none: any valid pointer).
    launch_kernel(step.kernel->fn, static_cast<unsigned>(grid), static_cast<unsigned>(k.block_x),
                  {p.constants.ptr() + static_cast<DevicePtr>(p.constant_offset[step.node]),
                   p.errors.ptr() + si * kernel::kErrorWords * sizeof(int32_t), p.errors.ptr()},
                  stream);
  }
  LUMINAL_CU(cuStreamSynchronize, stream);
}

void find_output_producers(ProgramPlan& p) {
  const luminal::Graph& g = p.graph;
  p.output_producer.assign(g.size(), kNoNode);
  std::vector<bool> taken(g.size(), false);
  std::vector<bool> is_step(g.size(), false);
  for (const Step& step : p.steps) is_step[step.node] = true;
  for (NodeId i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    // An in-place state update's Output reads the state itself: its producer writes there.
    if (n.op != OpKind::Output || n.inputs.size() != 1 || p.in_place_output[i]) continue;
    const NodeInput& in = n.inputs[0];
    const Node& src = g.node(in.node);
    if (!is_step[in.node] || src.op == OpKind::Output || p.constant_offset[in.node] >= 0 || taken[in.node]) continue;
    if (src.dtype != n.dtype || !in.view.is_contiguous() || in.view.shape() != src.shape || n.shape != src.shape) continue;
    taken[in.node] = true;
    p.output_producer[i] = in.node;
  }
}

// A KV-cache append's scatter computes its rows (RoPE of k) and indexes itself, spread
// over blocks; index-only regions (those indexes, a causal mask) are recomputed in their
// readers. Two kernels fewer per layer of a decode step. LUMINAL_CUDA_SCATTER_FUSION: 1
// (default) both, 0 neither, `scatter` or `index` one of them, to measure them.
kernel::FuseOptions cuda_fuse_options() {
  const char* env = std::getenv("LUMINAL_CUDA_SCATTER_FUSION");
  const std::string mode = env ? env : "1";
  kernel::FuseOptions o;
  o.scatter_roots = mode == "1" || mode == "scatter";
  o.recompute_index_regions = mode == "1" || mode == "index";
  return o;
}

}  // namespace

void CudaRuntime::load_program(size_t slot, const luminal::Graph& program, std::vector<NodeId> external_ids) {
  auto& s = *state_;
  s.shared->context->make_current();
  if (s.slots.size() <= slot) s.slots.resize(slot + 1);
  ProgramPlan p;
  kernel::RunnableProgram runnable = kernel::runnable_program(program, external_ids, cuda_fuse_options());
  kernel::adjoin_siblings(runnable, gemv_siblings);
  p.graph = std::move(runnable.graph);
  p.external_ids = std::move(runnable.external_ids);
  p.dim_names = std::move(runnable.dim_names);
  p.program_of = std::move(runnable.program_of);
  std::vector<std::string> regions;
  std::vector<std::string> step_regions;
  for (NodeId i = 0; i < p.graph.size(); ++i) {
    const Node& n = p.graph.node(i);
    if (n.op == OpKind::Input) continue;
    Step step;
    step.node = i;
    std::string region;
    if (n.op == OpKind::CustomOp) {
      // No device implementation of a user's op: its reference runs on the host, with the
      // inputs copied down and the result copied up (correct, slow, never silent: such a
      // program runs without CUDA graphs).
      step.kind = StepKind::Custom;
      for (const auto& in : n.inputs) {
        const Node& src = p.graph.node(in.node);
        bool direct = in.view.is_contiguous() && in.view.shape() == src.shape;
        step.custom_copy_regions.push_back(direct ? std::string()
                                                  : kernel::copy_region_text(src.dtype, src.shape, in.view, "cuda"));
        if (!direct) regions.push_back(step.custom_copy_regions.back());
      }
    } else if (is_matmul(n)) {
      step.kind = is_gemv(n) ? StepKind::Gemv : StepKind::CublasLt;
      LUMINAL_CHECK(n.inputs.size() == 2 || (n.inputs.size() == 3 && n.inputs[2].view.is_contiguous() &&
                                             p.graph.node(n.inputs[2].node).dtype == n.dtype),
                    "cuda: ", n.backend->name, " takes A, B and at most a contiguous residual of its dtype");
      step.gemm = cuda_gemm_layout(n.inputs[0].view, n.inputs[1].view);
      LUMINAL_CHECK(step.gemm.has_value(), "cuda: ", n.backend->name, " with operand views it cannot take");
      LUMINAL_CHECK(gemm_dtype(n.dtype), "cuda: ", n.backend->name, " of ", dtype_name(n.dtype),
                    " (F32, F16 and BF16 only)");
      const GemmOperand* ops[] = {&step.gemm->a, &step.gemm->b};
      for (int o = 0; o < 2; ++o) {
        const Node& src = p.graph.node(n.inputs[o].node);
        const auto widen = widened_weight(n, o, src.dtype);
        LUMINAL_CHECK(src.dtype == n.dtype || widen, "cuda: ", n.backend->name, " operand of ", dtype_name(src.dtype),
                      " for a ", dtype_name(n.dtype), " product");
        if (widen) step.weight_dtype = src.dtype;
        // Every operand has a copy region: one whose strides or alignment cuBLASLt or the
        // GEMV cannot take is packed first (decided per run, from the actual strides); a
        // widened weight's copy converts it to F32.
        step.copy_region[o] = kernel::copy_region_text(src.dtype, src.shape, ops[o]->copy_view, "cuda", widen);
        if (ops[o]->copy || widen) regions.push_back(step.copy_region[o]);
      }
    } else if (n.op == OpKind::BackendOp && n.backend->name == "CudaAttention") {
      step.kind = StepKind::Attention;
      LUMINAL_CHECK(n.inputs.size() == 5, "cuda: CudaAttention takes q, k, v, a mask and a scale, got ",
                    n.inputs.size(), " inputs");
      step.attention = attention_layout(n.inputs[0].view, n.inputs[1].view, n.inputs[2].view, n.inputs[3].view,
                                        n.inputs[4].view);
      LUMINAL_CHECK(step.attention.has_value(), "cuda: CudaAttention with operand views it cannot take");
      for (int o = 0; o < 5; ++o) {
        const DType want = o < 3 ? n.dtype : DType::F32;
        LUMINAL_CHECK(p.graph.node(n.inputs[o].node).dtype == want, "cuda: CudaAttention operand ", o, " of ",
                      dtype_name(p.graph.node(n.inputs[o].node).dtype), " (", dtype_name(want), " expected)");
      }
    } else if (n.op == OpKind::BackendOp && n.backend->name != "Fused") {
      fail("cuda: backend op '", n.backend->name, "' is not a CUDA op (was the program extracted for another backend?)");
    } else {
      region = *kernel::node_region_text(p.graph, n, "cuda");
      regions.push_back(region);
    }
    step_regions.push_back(std::move(region));
    p.steps.push_back(std::move(step));
  }
  s.shared->compile(regions);
  for (size_t k = 0; k < p.steps.size(); ++k)
    if (p.steps[k].kind == StepKind::Kernel) {
      p.steps[k].kernel = s.shared->get(step_regions[k]);
      if (auto u = kernel::in_place_update(p.graph, p.steps[k].node, p.steps[k].kernel->kernel)) p.in_place.push_back(*u);
    }
  p.in_place_output.assign(p.graph.size(), 0);
  for (const auto& u : p.in_place) p.in_place_output[u.output] = 1;
  // A run is resolved (and captured) once per value of every dim a launch reads: not only
  // those of node shapes, but those only an index expression names (a KV cache's write
  // position), or a stale value would be replayed.
  auto add_dims = [&](const Expression& e) {
    for (const auto& v : e.variables())
      if (v != Expression::kIndexName) p.dim_names.push_back(v);
  };
  for (const Step& step : p.steps) {
    if (step.kernel)
      for (const auto& d : step.kernel->kernel.dim_names) p.dim_names.push_back(d);
    if (step.gemm) {
      const GemmLayout& l = *step.gemm;
      for (const Expression* e : {&l.batch, &l.m, &l.n, &l.k}) add_dims(*e);
      for (const auto& e : l.outer) add_dims(e);
      for (const GemmOperand* o : {&l.a, &l.b}) {
        for (const Expression* e : {&o->offset, &o->row, &o->col, &o->batch}) add_dims(*e);
        for (const auto& e : o->outer) add_dims(e);
      }
    }
    for (const auto& in : p.graph.node(step.node).inputs) {  // views: operand copies read them
      add_dims(in.view.index_expression());
      add_dims(in.view.valid_expression());
      for (const auto& d : in.view.shape()) add_dims(d);
    }
  }
  std::sort(p.dim_names.begin(), p.dim_names.end());
  p.dim_names.erase(std::unique(p.dim_names.begin(), p.dim_names.end()), p.dim_names.end());
  p.errors = DeviceBuffer(std::max<size_t>(16, p.steps.size() * kernel::kErrorWords * sizeof(int32_t)));
  materialise_constants(p, s.stream());
  find_output_producers(p);
  s.slots[slot] = std::move(p);
}

void CudaRuntime::set_tensor(NodeId input, HostTensor data) {
  auto& s = *state_;
  const Node* n = s.find_io(input);
  LUMINAL_CHECK(n != nullptr, "tensor ", input, " is not an input or output of the loaded program");
  LUMINAL_CHECK(n->op == OpKind::Input, "set_data: tensor ", input, " is not an input");
  s.shared->context->make_current();
  if (data.dtype != n->dtype) data = data.cast(n->dtype);
  DeviceTensor& t = s.data[input];
  t.dtype = data.dtype;
  t.numel = data.numel();
  t.shape = data.shape;
  t.reserve(data.bytes.size());
  if (!data.bytes.empty()) LUMINAL_CU(cuMemcpyHtoDAsync, t.ptr(), data.bytes.data(), data.bytes.size(), s.stream());
  LUMINAL_CU(cuStreamSynchronize, s.stream());
  t.valid = true;
}

void CudaRuntime::bind_device_pointer(NodeId node, DevicePtr ptr, size_t bytes) {
  auto& s = *state_;
  const Node* n = s.find_io(node);
  LUMINAL_CHECK(n != nullptr, "tensor ", node, " is not an input or output of the loaded program");
  LUMINAL_CHECK(ptr != 0, "bind_device_pointer: null pointer for tensor ", node);
  DeviceTensor& t = s.data[node];
  t.buffer = DeviceBuffer();
  t.external = ptr;
  t.external_bytes = bytes;
  t.state_alias = false;
  t.dtype = n->dtype;
  if (n->op == OpKind::Input) {
    t.numel = bytes / dtype_bytes(n->dtype);
    t.shape.clear();
    t.valid = true;
  }
}

DevicePtr CudaRuntime::device_pointer(NodeId node) const {
  auto it = state_->data.find(node);
  return it == state_->data.end() ? 0 : it->second.ptr();
}

bool CudaRuntime::has_tensor(NodeId node) const {
  auto it = state_->data.find(node);
  return it != state_->data.end() && it->second.valid;
}

HostTensor CudaRuntime::get_tensor(NodeId node) const {
  auto& s = *state_;
  const Node* n = s.find_io(node);
  LUMINAL_CHECK(n != nullptr, "tensor ", node, " is not an input or output of the loaded program");
  auto it = s.data.find(node);
  LUMINAL_CHECK(it != s.data.end() && it->second.valid, "tensor ", node, " ('", n->label, "') has no data: ",
                n->op == OpKind::Output ? "execute has not run"
                                        : "it was never set, or a previous execute consumed it (persist() keeps it)");
  const DeviceTensor& t = it->second;
  s.shared->context->make_current();
  HostTensor h = HostTensor::zeros(t.dtype, t.numel, t.shape);
  const size_t bytes = h.bytes.size();
  // Results up to kPinnedStagingLimit (a decode step's logits) come through a page-locked
  // buffer kept for the next read: a pageable copy of 128256 BF16 logits took ~0.3 ms.
  if (bytes > 0 && bytes <= kPinnedStagingLimit) {
    if (s.staging.bytes() < bytes) s.staging = PinnedBuffer(std::max<size_t>(bytes, 1 << 20));
    LUMINAL_CU(cuMemcpyDtoHAsync, s.staging.data(), t.ptr(), bytes, s.stream());
    LUMINAL_CU(cuStreamSynchronize, s.stream());
    std::memcpy(h.bytes.data(), s.staging.data(), bytes);
    return h;
  }
  if (bytes > 0) LUMINAL_CU(cuMemcpyDtoHAsync, h.bytes.data(), t.ptr(), bytes, s.stream());
  LUMINAL_CU(cuStreamSynchronize, s.stream());
  return h;
}

namespace {

// Everything a run of one slot needs, resolved once per (dims, pointers).
struct Resolver {
  CudaRuntime::Shared& shared;
  const ProgramPlan& p;
  const DimMap& dims;
  const std::vector<DevicePtr>& ptr;  // per program node
  Resolved& r;

  std::vector<int64_t> dim_values;  // every kernel's dims, concatenated
  std::vector<size_t> dim_offset;   // per step
  size_t scratch_bytes[2] = {0, 0};

  // Every value a launch is built from goes through eval or blocks, which record it, so
  // that Resolved::serves can tell which other dims the launches fit.
  int64_t eval(const Expression& e) {
    const int64_t v = e.eval(dims);
    if (!e.is_constant()) r.probes.push_back({e, v, ProbeKind::Exact});
    return v;
  }
  int64_t blocks(const Expression& grid) {
    const int64_t v = grid.eval(dims);
    if (grid.is_constant()) return v;
    r.probes.push_back({grid, launch_blocks(v), ProbeKind::Grid});
    return launch_blocks(v);
  }
  int band(const Expression& e) {
    const int b = band_of(e.eval(dims));
    if (!e.is_constant()) r.probes.push_back({e, b, ProbeKind::Band});
    return b;
  }
  // Threads for a block-per-row launch, from the bands of the row's length and of the row
  // count: about four elements per thread (all their loads in flight at once), 32 to 1024,
  // and fewer while the rows alone would fill the device twice over. A prefill's causal
  // softmax (16384 rows of 512) took 128 us per layer in blocks of 256, nearly all of it
  // the blocks' reductions; a decode step's (32 rows) wants the threads. (Stopping at two
  // warps, so that an SM's 32 blocks fill its 2048 threads, made that softmax slower: 61
  // against 54 us per layer, session 13.)
  // A kernel whose threads take 16-byte chunks of the row (kernel::cuda_row_chunk_width)
  // gets a thread per chunk: a chunk already has its elements' loads in flight at once.
  unsigned row_threads(const Expression& length, const Expression& rows, int chunk) {
    const int per_thread_log2 = chunk > 1 ? 0 : 2;
    int64_t threads = std::clamp<int64_t>(
        int64_t{1} << std::max(band(chunk > 1 ? ceil_div(length, chunk) : length) - per_thread_log2, 0), 32, 1024);
    const int64_t resident = 2 * resident_threads();
    const int64_t row_count = int64_t{1} << band(rows);
    while (threads > 32 && row_count * threads > resident) threads /= 2;
    return static_cast<unsigned>(threads);
  }
  // Threads the device holds at once (2048 per SM).
  int64_t resident_threads() const {
    return 2048 * static_cast<int64_t>(std::max(shared.context->info().sm_count, 1));
  }
  bool positive(const Expression& e) {
    const bool v = e.eval(dims) > 0;
    if (!e.is_constant()) r.probes.push_back({e, v, ProbeKind::Positive});
    return v;
  }
  // The dims buffer gets these values (written again for every dims the resolution
  // serves); returns where they start, in int64s.
  size_t add_values(const std::vector<Expression>& exprs) {
    const size_t offset = dim_values.size();
    for (const auto& e : exprs) {
      dim_values.push_back(e.eval(dims));
      r.dim_exprs.push_back(e);
    }
    return offset;
  }
  size_t add_dims(const std::vector<std::string>& names) {
    std::vector<Expression> exprs;
    for (const auto& d : names) {
      LUMINAL_CHECK(dims.count(d), "execute: dimension '", d, "' has no value");
      exprs.push_back(Expression::var(d));
    }
    return add_values(exprs);
  }
  // An emitted kernel's dims array: its dims, then its invariant divisors' entries.
  size_t add_kernel_dims(const Compiled& c) {
    for (const auto& d : c.kernel.dim_names)
      LUMINAL_CHECK(dims.count(d), "execute: dimension '", d, "' has no value");
    return add_values(c.dims_entries);
  }

  // Launch of a compiled kernel: inputs, output, the step's error slot, its dims.
  void add_kernel(const std::shared_ptr<Compiled>& c, std::vector<DevicePtr> inputs, DevicePtr out, size_t step,
                  DevicePtr errors, const std::string& what) {
    const kernel::Kernel& k = c->kernel;
    int64_t grid = blocks(k.grid_x);
    // A scatter run in place (a KV-cache append: its output is the state's own buffer) has
    // no copy phase to wait for: its writes spread over blocks (the kernel compares the
    // pointers too). One block wrote a 512-token prefill's 512 x 1024 rows per cache: 1.1 ms.
    if (k.geometry == kernel::Geometry::SingleBlock && k.phases.front().copies_input >= 0 &&
        static_cast<size_t>(k.phases.front().copies_input) < inputs.size() &&
        inputs[static_cast<size_t>(k.phases.front().copies_input)] == out)
      grid = std::clamp<int64_t>(blocks((k.phases.back().rows + (k.block_x - 1)) / k.block_x), 1, 65535);
    // An elementwise kernel loops over its elements (emit_cuda): a vectorized one takes
    // `width` per thread and loop (16-byte loads); otherwise, past a few waves of resident
    // threads, each thread takes four, their loads in flight at once.
    if (const int width = c->vector_width; width > 1)
      grid = (grid + width - 1) / width;
    else if (k.geometry == kernel::Geometry::Elementwise && grid * k.block_x > kElementwiseWaves * resident_threads())
      grid = (grid + 3) / 4;
    LUMINAL_CHECK(grid <= std::numeric_limits<int32_t>::max(), "cuda: ", what, " needs ", grid,
                  " blocks, above the grid limit");
    if (grid <= 0) return;
    const size_t offset = add_kernel_dims(*c);
    dim_offset.push_back(offset);
    inputs.push_back(out);
    inputs.push_back(errors + step * kernel::kErrorWords * sizeof(int32_t));
    inputs.push_back(0);  // the dims pointer: filled once the dims buffer exists
    const size_t dims_arg = inputs.size() - 1;
    api::CUfunction fn = c->fn;
    // A block per row: threads for its chunks of columns (kernel::cuda_row_chunk_width).
    const unsigned block = k.geometry == kernel::Geometry::BlockPerRow
                               ? row_threads(k.row_extent, k.grid_x, c->row_chunk)
                               : static_cast<unsigned>(k.block_x);
    r.ops.push_back({[fn, grid, block, args = std::move(inputs), dims_arg, offset, this_r = &r](StreamHandle s) mutable {
                       args[dims_arg] = this_r->dims.ptr() + offset * sizeof(int64_t);
                       launch_kernel(fn, static_cast<unsigned>(grid), block, args, s);
                     },
                     false});
  }
};

// Whether an attention runs on tensor cores (kernels/attention_flash.cu): at least
// kAttentionFlashRows rows a batch (a prefill), F16 or BF16, depth = width = 64 or 128,
// q, k and v contiguous along the depth and width with 16-byte rows, sm_80 and later. The
// sizes and strides go through `rs`, so a resolution is reused only where they agree.
bool flash_attention_takes(const AttentionLayout& l, DType dtype, int cc_major, std::initializer_list<DevicePtr> operands,
                           Resolver& rs) {
  const auto depth = l.depth.as_constant(), width = l.width.as_constant();
  if (cc_major < 8 || (dtype != DType::F16 && dtype != DType::BF16) || !depth || !width || *depth != *width ||
      !attention_flash_depth(*depth))
    return false;
  if (rs.eval(l.rows) < kAttentionFlashRows) return false;
  for (DevicePtr operand : operands)
    if (operand % 16 != 0) return false;
  for (const Expression* e : {&l.q.offset, &l.q.batch, &l.q.row, &l.k.offset, &l.k.batch, &l.k.col, &l.v.offset,
                              &l.v.batch, &l.v.row})
    if (rs.eval(*e) % 8 != 0) return false;
  return rs.eval(l.q.col) == 1 && rs.eval(l.k.row) == 1 && rs.eval(l.v.col) == 1;
}

// The executable graph a run of `r` launches, or null to launch its ops one by one.
// - A resolution with its own graph, or the one the plan's live graph holds, replays it.
// - A resolution run a second time while the live graph holds another (dims that
//   alternate) gets its own graph, instantiated from its capture: both then replay.
// - A new resolution (a decode step at a new position, a rebound pointer, a grown arena)
//   is captured, which is cheap, and the live graph is updated in place to run it
//   (cuGraphExecUpdate) if it launches the same kernels and cuBLASLt plans (only its
//   arguments, grids and sizes differ; GraphExec::launches_same_as), else instantiated
//   from the capture; when the update is refused (a node added, removed or changed in a
//   way an update cannot take) the live graph is instantiated again from the capture.
// - The plan's very first run goes eagerly (a program run once never pays for a graph),
//   and so does every new resolution when updates are off (LUMINAL_CUDA_GRAPH_UPDATE=0,
//   set_graph_updates_enabled(false), a driver without cuGraphExecUpdate, or a plan whose
//   updates are often refused, see kMaxUpdateFailures): its second run captures it.
GraphExec* graph_to_launch(CudaRuntime::State& s, ProgramPlan& p, Resolved& r, StreamHandle stream,
                           const std::function<void()>& enqueue_all) {
  if (r.own) {
    ++s.replays;
    return r.own.get();
  }
  if (p.live && p.live_holds == r.id) {
    ++s.replays;
    return p.live.get();
  }
  if (r.runs >= 1) {
    if (!r.capture) r.capture = std::make_unique<CapturedGraph>(stream, enqueue_all);
    r.own = std::make_unique<GraphExec>(*r.capture);
    r.capture.reset();  // its own graph from now on: the template is not needed again
    ++s.captured;
    return r.own.get();
  }
  const bool update =
      s.graph_updates && updates_worth_trying(p.updates_refused, p.updates_done) && graph_update_available();
  if (p.runs == 0 || !update) return nullptr;
  r.capture = std::make_unique<CapturedGraph>(stream, enqueue_all);
  if (p.live && !p.live->launches_same_as(*r.capture)) {
    ++s.relaunched;  // another kernel or cuBLASLt plan: instantiated, not updated (GraphExec)
  } else if (p.live) {
    std::string why;
    if (p.live->update(*r.capture, &why)) {
      ++p.updates_done;
      p.live_holds = r.id;
      ++s.updated;
      return p.live.get();
    }
    ++p.updates_refused;
    s.last_update_refusal = why;
    if (!updates_worth_trying(p.updates_refused, p.updates_done))
      std::fprintf(stderr,
                   "luminal cuda: CUDA graph updates refused %d of %d times (last: %s); new dims of this program "
                   "now run eagerly and are captured on their second run\n",
                   p.updates_refused, p.updates_refused + p.updates_done, why.c_str());
  }
  // No live graph yet, or the update was refused: instantiate. (Destroying an executable
  // graph still in flight is safe: the driver frees it once it completes.)
  p.live = std::make_unique<GraphExec>(*r.capture);
  p.live_holds = r.id;
  ++s.captured;
  return p.live.get();
}

}  // namespace

void CudaRuntime::run(size_t slot, const DimMap& dims) {
  auto& s = *state_;
  LUMINAL_CHECK(slot < s.slots.size() && s.slots[slot].graph.size() > 0, "execute: no program loaded (compile first)");
  s.shared->context->make_current();
  ProgramPlan& p = s.slots[slot];
  const luminal::Graph& g = p.graph;
  const StreamHandle stream = s.stream();
  using host_clock = std::chrono::steady_clock;
  auto mark = host_clock::now();
  double run_ms[State::kPhases] = {};
  const int changes_before = s.resolutions + s.captured + s.updated + s.eager_runs;
  auto phase_done = [&](State::Phase ph) {
    const auto now = host_clock::now();
    run_ms[ph] = std::chrono::duration<double, std::milli>(now - mark).count();
    s.host_ms[ph] += run_ms[ph];
    mark = now;
  };
  std::vector<int64_t> key;
  for (const auto& d : p.dim_names) {
    auto it = dims.find(d);
    LUMINAL_CHECK(it != dims.end(), "execute: dimension '", d,
                  "' has no value; set it with Graph::set_dim or pass it in the dim map");
    key.push_back(it->second);
  }
  if (p.dims_info.size() >= 256 && !p.dims_info.count(key)) p.dims_info.clear();
  ProgramPlan::DimsInfo& info = p.dims_info[key];
  if (!info.computed) {
    if (p.input_numel.empty() && p.output_numel.empty())
      for (const Node& n : g.nodes()) {
        if (n.op == OpKind::Input) p.input_numel.push_back(product(n.shape));
        if (n.op == OpKind::Output) p.output_numel.push_back(product(n.shape));
      }
    for (const auto& e : p.input_numel) info.input_numel.push_back(e.eval(dims));
    size_t output_index = 0;
    for (const Node& n : g.nodes())
      if (n.op == OpKind::Output)
        info.output_bytes.push_back(static_cast<size_t>(p.output_numel[output_index++].eval(dims)) * dtype_bytes(n.dtype));
    info.computed = true;
  }
  // Inputs: the user's device buffers, checked against their shapes.
  std::vector<DevicePtr> ptr(g.size(), 0);
  std::vector<DevicePtr> bound;
  std::vector<std::pair<DevicePtr, size_t>> input_ranges;
  size_t input_index = 0;
  for (NodeId i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    if (n.op != OpKind::Input) continue;
    auto it = s.data.find(p.external_ids[i]);
    LUMINAL_CHECK(it != s.data.end() && it->second.valid, "execute: input '", n.label,
                  "' has no data (never set, or consumed by a previous execute; persist() keeps it)");
    const int64_t expect = info.input_numel[input_index++];
    LUMINAL_CHECK(static_cast<int64_t>(it->second.numel) == expect, "execute: input '", n.label, "' has ",
                  it->second.numel, " elements but its shape ", to_string(n.shape), " needs ", expect);
    ptr[i] = it->second.ptr();
    bound.push_back(ptr[i]);
    input_ranges.emplace_back(ptr[i], it->second.capacity());
  }
  // Intermediates live in the arena, planned for the largest size each buffer has had
  // (dims already seen to fit the current plan skip the planner).
  // In-place scatters and their update Outputs live in the state's buffer.
  std::vector<char> elsewhere(g.size(), 0);
  for (const auto& u : p.in_place) elsewhere[u.scatter] = elsewhere[u.output] = 1;
  auto needs_buffer = [&](NodeId id) { return g.node(id).op != OpKind::Input && !elsewhere[id]; };
  plan::ProgramBuffers now;
  bool fits = info.fits_version == p.arena_version;
  if (!fits && !p.use_bytes.empty() && p.use_bytes.size() == p.planned_uses.size()) {
    fits = true;  // the buffers' sizes against the plan's, without running the planner
    for (size_t i = 0; fits && i < p.use_bytes.size(); ++i) fits = p.use_bytes[i].eval(dims) <= p.planned_uses[i].bytes;
  }
  if (!fits) {
    now = plan::program_buffers(g, dims, needs_buffer, {}, [&](NodeId id) { return elsewhere[id] != 0; });
    fits = p.planned_uses.size() == now.uses.size();
    for (size_t i = 0; fits && i < now.uses.size(); ++i) fits = now.uses[i].bytes <= p.planned_uses[i].bytes;
  }
  if (!fits) {
    // A buffer that grew, or whose size depends on the dims when first planned, gets a
    // quarter of headroom: a decode length growing by one per step then keeps the plan
    // (and every pointer, so its launches: Resolved::serves) from its first step on.
    const bool replan = p.planned_uses.size() == now.uses.size();
    for (size_t i = 0; i < now.uses.size(); ++i) {
      int64_t& b = now.uses[i].bytes;
      if (replan)
        b = b > p.planned_uses[i].bytes ? b + b / 4 : p.planned_uses[i].bytes;
      else if (!product(g.node(now.nodes[i]).shape).is_constant())
        b += b / 4;
    }
    plan::MemoryPlan packed = plan::pack(now.uses, kAlignment);
    p.arena = packed;
    p.arena.offsets.assign(g.size(), plan::kNotInArena);
    for (size_t i = 0; i < now.nodes.size(); ++i) p.arena.offsets[now.nodes[i]] = packed.offsets[i];
    p.planned_uses = std::move(now.uses);
    p.use_bytes.clear();
    for (NodeId id : now.nodes)
      p.use_bytes.push_back(product(g.node(id).shape) * static_cast<int64_t>(dtype_bytes(g.node(id).dtype)));
    ++p.arena_version;
  }
  info.fits_version = p.arena_version;
  if (static_cast<int64_t>(s.arena.bytes()) < p.arena.arena_bytes) {
    // Regrown with a quarter of headroom (a decode length grows every step).
    LUMINAL_CU(cuStreamSynchronize, stream);
    const size_t need = static_cast<size_t>(p.arena.arena_bytes);
    s.arena = DeviceBuffer();
    s.arena = DeviceBuffer(s.arena_version == 0 ? need : std::max(need, need + need / 4));
    ++s.arena_version;
  }
  s.last_arena = p.arena.arena_bytes;
  for (NodeId i = 0; i < g.size(); ++i)
    if (g.node(i).op != OpKind::Input && p.arena.offsets[i] != plan::kNotInArena)
      ptr[i] = s.arena.ptr() + static_cast<DevicePtr>(p.arena.offsets[i]);
  for (NodeId i = 0; i < g.size(); ++i)
    if (p.constant_offset[i] >= 0) ptr[i] = p.constants.ptr() + static_cast<DevicePtr>(p.constant_offset[i]);
  for (const auto& u : p.in_place) ptr[u.scatter] = ptr[u.output] = ptr[u.state];
  // Outputs are written straight into the user's buffers (kept from run to run).
  struct OutputBuffer {
    NodeId node;
    DeviceTensor* tensor;
    size_t bytes;
  };
  std::vector<OutputBuffer> outputs;
  size_t output_index = 0;
  for (NodeId i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    if (n.op != OpKind::Output) continue;
    const size_t bytes = info.output_bytes[output_index++];
    if (p.in_place_output[i] && p.external_ids[i] == kNoNode) continue;  // the state itself
    if (p.in_place_output[i]) {
      // The caller may read an update Output; after the run it is the state's buffer, so
      // it aliases that instead of copying the whole cache every step (64 launches of a
      // 1 MB copy per 8B decode step), unless the caller bound memory of their own to it.
      DeviceTensor& t = s.data[p.external_ids[i]];
      if (!t.external || t.state_alias) {
        t.buffer = DeviceBuffer();
        t.external = ptr[i];  // the state's (see p.in_place above)
        t.external_bytes = bytes;
        t.state_alias = true;
        bound.push_back(ptr[i]);
        outputs.push_back({i, &t, bytes});
        continue;
      }
    }
    DeviceTensor& t = p.external_ids[i] != kNoNode ? s.data[p.external_ids[i]] : p.private_outputs[i];
    if (t.state_alias) {  // aliased by a plan that ran in place: this one writes a copy
      t.external = 0;
      t.external_bytes = 0;
      t.state_alias = false;
    }
    t.reserve(bytes);
    ptr[i] = t.ptr();
    bound.push_back(ptr[i]);
    outputs.push_back({i, &t, bytes});
  }
  // Producers that write straight into their Output's buffer (find_output_producers), so
  // the Output's copy is skipped; not when that buffer overlaps an input's (a caller may
  // bind an output over an input, which the producer may still be reading) or when a
  // matmul would write it off cuBLASLt's alignment. The choice follows from the pointers,
  // which are part of the resolution's key.
  std::vector<bool> output_aliased(g.size(), false);
  for (auto& [i, t, out_bytes] : outputs) {
    const NodeId src = p.output_producer[i];
    if (src == kNoNode) continue;
    const DevicePtr out = t->ptr();
    const size_t bytes = t->capacity();
    bool overlaps = false;
    for (const auto& [in, in_bytes] : input_ranges) overlaps = overlaps || (out < in + in_bytes && in < out + bytes);
    if (overlaps || (is_matmul(g.node(src)) && out % kAlignment != 0)) continue;
    output_aliased[i] = true;
    ptr[src] = out;
  }
  bound.push_back(s.arena.ptr());
  bound.push_back(static_cast<DevicePtr>(s.arena_version));
  bound.push_back(static_cast<DevicePtr>(p.arena_version));

  // Resolve (once per dims and pointers): every launch with its arguments.
  if (p.resolved.size() >= kMaxResolutions && !p.resolved.count(key)) {
    auto oldest = std::min_element(p.resolved.begin(), p.resolved.end(), [](const auto& a, const auto& b) {
      return (a.second ? a.second->last_used : 0) < (b.second ? b.second->last_used : 0);
    });
    LUMINAL_CU(cuStreamSynchronize, stream);
    p.resolved.erase(oldest);
  }
  phase_done(State::kPrepare);
  auto& slot_entry = p.resolved[key];
  bool fresh_resolve = !slot_entry || slot_entry->bound != bound;
  if (fresh_resolve && p.latest && p.latest->serves(dims, bound)) {
    slot_entry = p.latest;  // the same launches: only the dims buffer changes
    fresh_resolve = false;
    ++s.reused;
  }
  if (fresh_resolve) try {
    LUMINAL_CU(cuStreamSynchronize, stream);  // the old entry's buffers may be in use
    ++s.resolutions;
    slot_entry = std::make_shared<Resolved>();
    Resolved& r = *slot_entry;
    r.bound = bound;
    r.id = ++p.next_resolution_id;
    Resolver rs{*s.shared, p, dims, ptr, r, {}, {}, {}};
    const DevicePtr errors = p.errors.ptr();
    const int sm_count = s.shared->context->info().sm_count;
    r.ops.push_back({[errors, n = p.errors.bytes()](StreamHandle st) { LUMINAL_CU(cuMemsetD8Async, errors, 0, n, st); },
                     false});
    // Matmul operand copies go to scratch buffers allocated after resolving (their size
    // is the largest step's); ops read the pointers at enqueue time through `r`.
    // The GEMV launch the next step may join (kernel::adjoin_siblings put siblings in a row):
    // the launch is enqueued after resolving, so it reads the group as complete.
    std::shared_ptr<GemvGroupArgs> open_group;
    size_t open_group_op = 0;
    std::vector<GemvLaunch> gemv_launches;  // in launch order, for link_gemv_prefetches
    for (size_t si = 0; si < p.steps.size(); ++si) {
      const Step& step = p.steps[si];
      const Node& n = g.node(step.node);
      const std::string what = n.op == OpKind::BackendOp ? n.backend->name : std::string(op_name(n.op));
      if (step.kind != StepKind::Gemv) open_group.reset();
      // Constants were computed at load; an Output its producer wrote needs no copy.
      if (p.constant_offset[step.node] >= 0 || output_aliased[step.node]) continue;
      const size_t first_op = r.ops.size();
      std::vector<DevicePtr> ins;
      for (const auto& in : n.inputs) ins.push_back(ptr[in.node]);
      switch (step.kind) {
        case StepKind::Kernel:
          if (p.in_place_output[step.node] && ptr[step.node] == ptr[n.inputs[0].node]) break;  // void copy
          rs.add_kernel(step.kernel, ins, ptr[step.node], si, errors, what);
          break;
        case StepKind::Gemv:
        case StepKind::CublasLt: {
          const GemmLayout& l = *step.gemm;
          // CudaGemvAdd / CudaCublasLtAdd: a residual [batch?, m, n], laid out as the result.
          const DevicePtr residual = n.inputs.size() > 2 ? ptr[n.inputs[2].node] : 0;
          if (!residual && runs_as_small_matmul(step, l, n.dtype, dims)) {
            open_group.reset();
            // Its sizes go to the dims buffer; the resolution holds while they stay positive.
            rs.eval(l.m);
            rs.positive(l.n);
            rs.positive(l.k);
            rs.positive(l.batch);
            const size_t params = rs.add_values({l.m, l.n, l.k, l.batch, l.a.offset, l.a.row, l.a.col, l.a.batch,
                                                 l.b.offset, l.b.row, l.b.col, l.b.batch});
            const int64_t grid = rs.blocks(l.batch * l.m * ((l.n + 31) / 32));
            LUMINAL_CHECK(grid <= std::numeric_limits<int32_t>::max(), "cuda: ", what, " needs ", grid,
                          " blocks, above the grid limit");
            api::CUfunction fn = s.shared->modules->function(small_matmul_source(n.dtype), kSmallMatmulKernelName);
            const DevicePtr a = ptr[n.inputs[0].node], b = ptr[n.inputs[1].node], out = ptr[step.node];
            Resolved* rp = &r;
            r.ops.push_back({[fn, grid, a, b, out, params, rp](StreamHandle st) {
                               launch_kernel(fn, static_cast<unsigned>(grid), kSmallMatmulThreads,
                                             {a, b, out, rp->dims.ptr() + params * sizeof(int64_t)}, st);
                             },
                             false});
            break;
          }
          const int64_t m = rs.eval(l.m), nn = rs.eval(l.n), k = rs.eval(l.k), batch = rs.eval(l.batch);
          const DType dt = n.dtype;
          const int64_t esize = static_cast<int64_t>(dtype_bytes(dt));
          const DevicePtr out = ptr[step.node];
          if (m == 0 || nn == 0 || batch == 0) break;
          if (k == 0) {  // an empty sum: zeros, or the residual
            const size_t bytes = static_cast<size_t>(m * nn * batch * esize);
            r.ops.push_back({[out, bytes, residual](StreamHandle st) {
                               if (residual) {
                                 if (residual != out) LUMINAL_CU(cuMemcpyDtoDAsync, out, residual, bytes, st);
                               } else {
                                 LUMINAL_CU(cuMemsetD8Async, out, 0, bytes, st);
                               }
                             },
                             false});
            break;
          }
          // Each operand as [rows, cols] with element strides; packed through its copy
          // kernel when the library cannot read it as it lies.
          struct Operand {
            DevicePtr base = 0;
            int64_t rows = 0, cols = 0, rs = 0, cs = 0, bs = 0;
            int scratch = -1;  // >= 0: read from that scratch buffer
          } op[2];
          const GemmOperand* go[] = {&l.a, &l.b};
          const bool gemv = step.kind == StepKind::Gemv && batch == 1 && m <= kGemvMaxRows;
          if (!gemv) open_group.reset();
          for (int o = 0; o < 2; ++o) {
            Operand& x = op[o];
            x.rows = o == 0 ? m : k;
            x.cols = o == 0 ? k : nn;
            // A half-precision weight under an F32 product: read in place by the GEMV,
            // widened into scratch for cuBLASLt (which takes one operand type).
            const bool widened = o == 1 && step.weight_dtype.has_value();
            const int64_t src_esize = widened ? static_cast<int64_t>(dtype_bytes(*step.weight_dtype)) : esize;
            bool copy = go[o]->copy;
            const GemmOperand* strides = go[o];
            std::optional<OperandAtDims> here;
            if (copy && !widened) {
              here = operand_at_dims(l, n.inputs[0].view, n.inputs[1].view, o, dims);
              if (here) {
                for (const auto& name : here->pinned) rs.eval(Expression::var(name));
                strides = &here->operand;
                copy = false;
              }
            }
            if (!copy) {
              x.base = ptr[n.inputs[o].node] + static_cast<DevicePtr>(rs.eval(strides->offset) * src_esize);
              x.rs = rs.eval(strides->row);
              x.cs = rs.eval(strides->col);
              x.bs = rs.eval(strides->batch);
              if (gemv) {
                // The GEMV reads x as [m, k] and w as [n, k], both packed.
                copy = o == 0 ? !(x.cs == 1 && (m == 1 || x.rs == k)) : !(x.rs == 1 && (nn == 1 || x.cs == k));
              } else {
                copy = widened || x.base % kAlignment != 0 || !lt_layout(x.rows, x.cols, x.rs, x.cs, x.bs, batch);
              }
            }
            if (copy) {
              // Packed: A as [batch?, m, k], B as [batch?, n, k] (k contiguous).
              const int64_t elems = batch * (o == 0 ? m * k : nn * k);
              rs.scratch_bytes[o] = std::max(rs.scratch_bytes[o], static_cast<size_t>(elems * esize));
              auto copier = s.shared->get(step.copy_region[o]);
              x.scratch = o;
              const DevicePtr src = ptr[n.inputs[o].node];
              // The copy kernel's output pointer is the scratch buffer, known at enqueue.
              const int64_t grid = rs.blocks(copier->kernel.grid_x);
              const size_t offset = rs.add_kernel_dims(*copier);
              api::CUfunction fn = copier->fn;
              const unsigned block = static_cast<unsigned>(copier->kernel.block_x);
              const DevicePtr err = errors + si * kernel::kErrorWords * sizeof(int32_t);
              Resolved* rp = &r;
              if (grid > 0)
                r.ops.push_back({[fn, grid, block, src, err, offset, rp, o](StreamHandle st) {
                                   launch_kernel(fn, static_cast<unsigned>(grid), block,
                                                 {src, rp->scratch[o].ptr(), err, rp->dims.ptr() + offset * sizeof(int64_t)},
                                                 st);
                                 },
                                 false});
              if (o == 0) {
                x.rs = k, x.cs = 1, x.bs = m * k;
              } else {
                x.rs = 1, x.cs = k, x.bs = nn * k;
              }
            }
          }
          Resolved* rp = &r;
          auto operand_ptr = [rp](const Operand& x) { return x.scratch >= 0 ? rp->scratch[x.scratch].ptr() : x.base; };
          if (gemv) {
            GemvArgs a;
            a.dtype = dt;
            if (step.weight_dtype && op[1].scratch < 0) a.weight_dtype = step.weight_dtype;  // else widened
            a.M = static_cast<int>(m);
            a.N = static_cast<int>(nn);
            a.K = static_cast<int>(k);
            LUMINAL_CHECK(nn <= std::numeric_limits<int32_t>::max() && k <= std::numeric_limits<int32_t>::max(),
                          "cuda: GEMV sizes above 2^31");
            int cap = 1;
            while (cap < a.M) cap *= 2;
            ModuleCache* cache = s.shared->modules.get();
            // Read in place with 16-byte loads (no operand copy): it may share a launch with
            // the GEMV just before it when both read the same x.
            const int vector = 16 / static_cast<int>(dtype_bytes(a.weight_dtype.value_or(dt)));
            a.residual = residual;
            const bool groupable = !residual && op[0].scratch < 0 && op[1].scratch < 0 && a.K % vector == 0 &&
                                   op[0].base % 16 == 0 && op[1].base % 16 == 0;
            if (!groupable) open_group.reset();
            if (groupable && open_group && open_group->count < kGemvGroupMax && open_group->x == op[0].base &&
                open_group->M == a.M && open_group->K == a.K && open_group->dtype == dt &&
                open_group->weight_dtype == a.weight_dtype) {
              GemvGroupArgs& joined = *open_group;
              joined.w[joined.count] = op[1].base;
              joined.y[joined.count] = out;
              joined.N[joined.count] = a.N;
              ++joined.count;
              const GemvConfig cfg = gemv_group_config(joined, sm_count);  // loaded now, outside any capture
              s.shared->modules->function(gemv_group_source(dt, cap, cfg.rows_per_warp, cfg.unroll, a.weight_dtype),
                                          kGemvGroupKernelName);
              if (s.profiling) r.ops[open_group_op].label += " + " + what;
              ++s.gemvs_grouped;
              break;
            }
            // Load the variant now, outside any stream capture.
            const GemvConfig cfg = choose_gemv_config(a.M, a.N, a.K, sm_count);
            s.shared->modules->function(
                gemv_source(dt, cap, cfg.rows_per_warp, Activation::None, cfg.unroll, a.weight_dtype), kGemvKernelName);
            if (groupable) {
              open_group = std::make_shared<GemvGroupArgs>();
              GemvGroupArgs& gr = *open_group;
              gr.dtype = dt;
              gr.weight_dtype = a.weight_dtype;
              gr.M = a.M;
              gr.K = a.K;
              gr.x = op[0].base;
              gr.w[0] = op[1].base;
              gr.y[0] = out;
              gr.N[0] = a.N;
              gr.count = 1;
              open_group_op = r.ops.size();
              gemv_launches.push_back({nullptr, open_group, 0, 0});
              r.ops.push_back({[group = open_group, a, cache, sm_count](StreamHandle st) mutable {
                                 if (group->count > 1) return launch_gemv_group(*cache, *group, st, sm_count);
                                 a.x = group->x;
                                 a.w = group->w[0];
                                 a.y = group->y[0];
                                 a.next = group->next;
                                 a.next_bytes = group->next_bytes;
                                 launch_gemv(*cache, a, st, sm_count);
                               },
                               false});
              break;
            }
            auto args = std::make_shared<GemvArgs>(a);
            const int64_t weight_bytes =
                nn * k * static_cast<int64_t>(dtype_bytes(a.weight_dtype.value_or(dt)));
            gemv_launches.push_back({args, nullptr, op[1].scratch < 0 ? op[1].base : 0, weight_bytes});
            r.ops.push_back({[args, op0 = op[0], op1 = op[1], out, operand_ptr, cache, sm_count](StreamHandle st) {
                               GemvArgs a = *args;
                               a.x = operand_ptr(op0);
                               a.w = operand_ptr(op1);
                               a.y = out;
                               launch_gemv(*cache, a, st, sm_count);
                             },
                             false});
          } else {
            MatmulSpec spec;
            spec.dtype = dt;
            spec.m = m;
            spec.n = nn;
            spec.k = k;
            spec.batch = batch;
            auto la = lt_layout(op[0].rows, op[0].cols, op[0].rs, op[0].cs, op[0].bs, batch);
            auto lb = lt_layout(op[1].rows, op[1].cols, op[1].rs, op[1].cs, op[1].bs, batch);
            LUMINAL_ASSERT(la && lb, "cuda: a packed matmul operand has no cuBLASLt layout");
            spec.a = *la;
            spec.b = *lb;
            spec.d.order = Order::RowMajor;
            spec.d.ld = nn;
            spec.d.batch_stride = batch > 1 ? m * nn : 0;
            // D = A B + D, D first a copy of the residual. Not C = the residual: on an H100,
            // cuBLASLt's BF16 product of 40 x 72 x 40 with C != D (an algorithm the autotune
            // had timed with C == D) wrote zeros (docs/LESSONS.md).
            if (residual) spec.beta = 1.0f;
            std::string why;
            LUMINAL_CHECK(cublaslt_supports(spec, &why), "cuda: cuBLASLt cannot run ", what, ": ", why);
            CublasLt& lt = s.shared->cublaslt();
            const CublasLt::Plan* plan = &lt.prepare(spec);  // outside capture: the heuristic runs once
            const size_t out_bytes = static_cast<size_t>(m * nn * batch * esize);
            r.ops.push_back({[plan, &lt, op0 = op[0], op1 = op[1], out, residual, out_bytes, operand_ptr](StreamHandle st) {
                               if (residual && residual != out)
                                 LUMINAL_CU(cuMemcpyDtoDAsync, out, residual, out_bytes, st);
                               lt.enqueue(*plan, operand_ptr(op0), operand_ptr(op1), out, 0, st);
                             },
                             false});
          }
          break;
        }
        case StepKind::Attention: {
          // Sizes and strides go to the dims buffer (the kernel reads them when it runs), so
          // the launch holds while the cache grows.
          const AttentionLayout& l = *step.attention;
          if (!rs.positive(l.batch * l.rows)) break;
          std::vector<Expression> values{l.batch,     l.rows,     l.group,    l.seq,      l.keys,    l.depth,
                                         l.width,     l.q.offset, l.q.batch,  l.q.row,    l.q.col,   l.k.offset,
                                         l.k.batch,   l.k.row,    l.k.col,    l.v.offset, l.v.batch, l.v.row,
                                         l.v.col,     l.mask_offset};
          values.insert(values.end(), l.mask_strides.begin(), l.mask_strides.end());
          values.push_back(l.scale_offset);
          values.insert(values.end(), l.scale_strides.begin(), l.scale_strides.end());
          LUMINAL_ASSERT(values.size() == static_cast<size_t>(kAttentionRowsParams), "cuda: attention params ",
                         values.size());
          const size_t params = rs.add_values(values);
          const DevicePtr q = ptr[n.inputs[0].node], k = ptr[n.inputs[1].node], v = ptr[n.inputs[2].node],
                          mask = ptr[n.inputs[3].node], scale = ptr[n.inputs[4].node], out = ptr[step.node];
          const int cc_major = s.shared->context->info().cc_major;
          // A prefill's many rows per batch run on tensor cores (kernels/attention_flash.cu)
          // where the layout allows; a decode step's few rows take a cluster of blocks each.
          const bool flash = flash_attention_takes(l, n.dtype, cc_major, {q, k, v}, rs);
          const int split = flash ? 1 : attention_rows_split(cc_major);
          const int64_t grid =
              flash ? rs.blocks(l.batch * ceil_div(l.rows, Expression(kAttentionFlashRows))) : rs.blocks(l.batch * l.rows) * split;
          LUMINAL_CHECK(grid <= std::numeric_limits<int32_t>::max(), "cuda: ", what, " needs ", grid,
                        " blocks, above the grid limit");
          api::CUfunction fn =
              flash ? s.shared->modules->function(attention_flash_source(n.dtype, static_cast<int>(*l.depth.as_constant())),
                                                  kAttentionFlashKernelName)
                    : s.shared->modules->function(attention_rows_source(n.dtype, split), kAttentionRowsKernelName);
          const unsigned threads = flash ? kAttentionFlashThreads : kAttentionRowsThreads;
          Resolved* rp = &r;
          r.ops.push_back({[fn, grid, threads, q, k, v, mask, scale, out, params, rp](StreamHandle st) {
                             launch_kernel(fn, static_cast<unsigned>(grid), threads,
                                           {q, k, v, mask, scale, out, rp->dims.ptr() + params * sizeof(int64_t)}, st);
                           },
                           false});
          break;
        }
        case StepKind::Custom: {
          r.host_ops = true;
          const size_t first_scratch = r.custom_scratch.size();
          std::vector<std::vector<int64_t>> shapes;
          std::vector<DType> dtypes;
          for (size_t k = 0; k < n.inputs.size(); ++k) {
            const auto& in = n.inputs[k];
            std::vector<int64_t> shape;
            for (const auto& d : in.view.shape()) shape.push_back(rs.eval(d));
            shapes.push_back(shape);
            dtypes.push_back(g.node(in.node).dtype);
            const size_t bytes = static_cast<size_t>(rs.eval(product(in.view.shape()))) * dtype_bytes(dtypes.back());
            if (step.custom_copy_regions[k].empty()) {
              r.custom_scratch.emplace_back();  // read in place
            } else {
              r.custom_scratch.emplace_back(std::max<size_t>(bytes, 16));
              rs.add_kernel(s.shared->get(step.custom_copy_regions[k]), {ins[k]}, r.custom_scratch.back().ptr(), si,
                            errors, what + " input copy");
            }
          }
          std::vector<int64_t> out_shape;
          for (const auto& d : n.shape) out_shape.push_back(rs.eval(d));
          const size_t out_bytes = static_cast<size_t>(rs.eval(product(n.shape))) * dtype_bytes(n.dtype);
          std::shared_ptr<const CustomOp> custom = n.custom;
          const DType out_dtype = n.dtype;
          const DevicePtr out = ptr[step.node];
          Resolved* rp = &r;
          r.ops.push_back({[custom, shapes, dtypes, ins, first_scratch, rp, out_shape, out_bytes, out_dtype,
                            out](StreamHandle st) {
                             LUMINAL_CU(cuStreamSynchronize, st);
                             std::vector<HostTensor> host;
                             for (size_t k = 0; k < shapes.size(); ++k) {
                               size_t numel = 1;
                               for (auto x : shapes[k]) numel *= static_cast<size_t>(x);
                               HostTensor t = HostTensor::zeros(dtypes[k], numel, shapes[k]);
                               const DeviceBuffer& copy = rp->custom_scratch[first_scratch + k];
                               const DevicePtr src = copy.ptr() ? copy.ptr() : ins[k];
                               if (!t.bytes.empty()) LUMINAL_CU(cuMemcpyDtoHAsync, t.bytes.data(), src, t.bytes.size(), st);
                               host.push_back(std::move(t));
                             }
                             LUMINAL_CU(cuStreamSynchronize, st);
                             HostTensor result = custom->execute_reference(host, out_shape, out_dtype);
                             LUMINAL_CHECK(result.dtype == out_dtype && result.bytes.size() == out_bytes, "custom op '",
                                           custom->name(), "' returned the wrong size or dtype");
                             if (out_bytes) LUMINAL_CU(cuMemcpyHtoDAsync, out, result.bytes.data(), out_bytes, st);
                             LUMINAL_CU(cuStreamSynchronize, st);
                           },
                           true});
          break;
        }
      }
      if (s.profiling) {
        std::string label = what;
        if (step.kind == StepKind::Kernel && n.op == OpKind::BackendOp) {
          // A fused region: name its ops, so the table tells a softmax from a norm.
          std::string ops;
          const kernel::Region region = kernel::parse_region(n.backend->str(0));
          for (const Node& rn : region.graph.nodes())
            if (rn.op != OpKind::Input && rn.op != OpKind::Output) {
              if (!ops.empty()) ops += ',';
              ops += op_name(rn.op);
            }
          label += "[" + ops + "]";
        }
        label += " [";
        for (size_t d = 0; d < n.shape.size(); ++d) {
          if (d) label += 'x';
          label += std::to_string(rs.eval(n.shape[d]));
        }
        label += "]";
        for (size_t k = first_op; k < r.ops.size(); ++k) r.ops[k].label = label;
      }
    }
    // State updates (KV caches, ...): the output's bytes land in the persisted input.
    for (auto& [i, t, bytes_] : outputs) {
      const Node& n = g.node(i);
      if (n.updates == kNoNode || p.in_place_output[i]) continue;
      auto it = s.data.find(p.external_ids[n.updates]);
      LUMINAL_CHECK(it != s.data.end(), "execute: state input of output '", n.label, "' has no data");
      const size_t bytes = static_cast<size_t>(rs.eval(product(n.shape))) * dtype_bytes(n.dtype);
      LUMINAL_CHECK(it->second.capacity() >= bytes, "execute: state input of output '", n.label, "' is smaller than it");
      const DevicePtr dst = it->second.ptr(), src = ptr[i];
      r.ops.push_back({[dst, src, bytes](StreamHandle st) { copy_device_to_device(dst, src, bytes, st); }, false});
    }
    link_gemv_prefetches(gemv_launches, gemv_prefetch_next_bytes(s.shared->context->info().l2_bytes));
    for (int o = 0; o < 2; ++o)
      if (rs.scratch_bytes[o]) r.scratch[o] = DeviceBuffer(rs.scratch_bytes[o]);
    r.dims = DeviceBuffer(std::max<size_t>(16, rs.dim_values.size() * sizeof(int64_t)));
    if (!rs.dim_values.empty()) r.dims.upload(rs.dim_values.data(), rs.dim_values.size() * sizeof(int64_t), stream);
    r.dims_key = key;
  } catch (...) {
    p.resolved.erase(key);  // never replay a half-resolved run
    throw;
  }
  Resolved& r = *slot_entry;
  r.write_dims(key, dims, stream);
  p.latest = slot_entry;
  r.last_used = ++p.clock;
  auto enqueue_all = [&] {
    for (auto& op : r.ops) op.enqueue(stream);
  };
  phase_done(State::kResolve);
  GraphExec* exec = nullptr;
  if (s.graphs && !r.host_ops) exec = graph_to_launch(s, p, r, stream, enqueue_all);
  phase_done(State::kGraph);
  ++p.runs;
  if (exec) {
    ++r.runs;
    exec->launch(stream);
  } else if (s.profiling) {
    ++r.runs;
    ++s.profiled_runs;
    // Each op between its own two events. The host enqueues an op and its events more
    // slowly than the GPU runs a small kernel, so timing them as they are enqueued would
    // measure the host: a short hold kernel goes before every batch of ops, and the GPU
    // runs the batch back to back, as it would from a graph. The events are made first.
    constexpr size_t kBatch = 64;
    constexpr int64_t kHoldNs = 2'000'000;  // enqueueing a batch takes well under 2 ms
    std::vector<Event> starts(r.ops.size()), ends(r.ops.size());
    for (size_t k = 0; k < r.ops.size(); ++k) {
      if (k % kBatch == 0) hold_stream(*s.shared->modules, kHoldNs, stream);
      starts[k].record(stream);
      r.ops[k].enqueue(stream);
      ends[k].record(stream);
    }
    if (!r.ops.empty()) ends.back().synchronize();
    for (size_t k = 0; k < r.ops.size(); ++k) {
      OpProfile& prof = s.op_profile[r.ops[k].label.empty() ? "(runtime)" : r.ops[k].label];
      prof.ms += Event::elapsed_ms(starts[k], ends[k]);
      prof.calls++;
    }
  } else {
    ++r.runs;
    ++s.eager_runs;
    for (auto& op : r.ops) {
      check_deadline();
      op.enqueue(stream);
    }
  }
  phase_done(State::kLaunch);
  std::vector<int32_t> errors(p.steps.size() * kernel::kErrorWords, 0);
  if (!s.defer_wait) {  // a deferred run's records stay zero here; the last run of its batch reads them
    if (!errors.empty()) p.errors.download(errors.data(), errors.size() * sizeof(int32_t), stream);
    else LUMINAL_CU(cuStreamSynchronize, stream);
  }
  phase_done(State::kWait);
  ++s.timed_runs;
  if (s.resolutions + s.captured + s.updated + s.eager_runs == changes_before) {
    for (int ph = 0; ph < State::kPhases; ++ph) s.steady_ms[ph] += run_ms[ph];
    ++s.steady_runs;
  }
  for (size_t k = 0; k < p.steps.size(); ++k) {
    std::span<const int32_t> record(errors.data() + k * kernel::kErrorWords, kernel::kErrorWords);
    if (record[0] == 0) continue;
    const Step& step = p.steps[k];
    const Node& n = g.node(step.node);
    if (step.kind == StepKind::Kernel && step.kernel) fail(kernel::describe_error(step.kernel->kernel, record, dims, n.user_op));
    fail(n.user_op.empty() ? std::string(op_name(n.op)) : n.user_op, ": ", kernel_error_text(record[0]));
  }
  // Outputs are readable; state updates landed in their inputs; inputs that do not
  // persist are consumed (their buffers are kept for the next run).
  for (auto& [i, t, bytes] : outputs) {
    const Node& n = g.node(i);
    t->dtype = n.dtype;
    t->numel = bytes / dtype_bytes(n.dtype);
    t->shape.clear();
    t->valid = true;
  }
  for (NodeId i = 0; i < g.size(); ++i)
    if (g.node(i).op == OpKind::Input && !g.node(i).persist) {
      auto it = s.data.find(p.external_ids[i]);
      if (it != s.data.end() && !it->second.external) it->second.valid = false;
    }
}

void CudaRuntime::fill_profiling_input(NodeId id, const Node& input, const DimMap& dims, uint64_t seed,
                                       InputValues values) {
  auto& s = *state_;
  if (!gemm_dtype(input.dtype) || s.find_io(id) == nullptr) {
    Runtime::fill_profiling_input(id, input, dims, seed, values);
    return;
  }
  s.shared->context->make_current();
  const auto numel = static_cast<size_t>(product(input.shape).eval(dims));
  DeviceTensor& t = s.data[id];
  t.dtype = input.dtype;
  t.numel = numel;
  t.shape.clear();
  t.reserve(numel * dtype_bytes(input.dtype));
  // Uniform in [-scale, scale), and the special values, as the host default (not the same values).
  fill_uniform(*s.shared->modules, input.dtype, t.ptr(), static_cast<int64_t>(numel), static_cast<uint32_t>(seed ^ (seed >> 32)),
               static_cast<float>(profiling_scale(input, dims)), s.stream(),
               values == InputValues::Uniform ? FillSpecials::None
               : values == InputValues::Special ? FillSpecials::All
                                                : FillSpecials::NoLargeMagnitudes);
  LUMINAL_CU(cuStreamSynchronize, s.stream());
  t.valid = true;
}

ProfileResult CudaRuntime::profile(const DimMap& dims, const ProfileOptions& o) {
  using clock = std::chrono::steady_clock;
  auto& s = *state_;
  s.shared->context->make_current();
  ProfileResult result;
  // The timeout bounds the timed runs. The warm-ups pay one-time costs (resolution,
  // cuBLASLt heuristics, arena and workspace allocation, graph capture) that grow with the
  // model, not with the candidate's speed: a Llama-3-8B layer at a 512-token prefill spent
  // its whole second there, so every candidate "timed out" and the search kept the
  // unrewritten program. They get a deadline of their own, 20x the timeout (at least 30 s).
  auto warm_start = clock::now();
  set_deadline(warm_start + std::chrono::duration_cast<clock::duration>(
                                std::max<std::chrono::duration<double>>(o.timeout * 20, std::chrono::seconds(30))));
  double best = std::numeric_limits<double>::infinity();
  auto start = warm_start;
  try {
    // Two warm-up runs at least: the first resolves (and compiles anything left), the
    // second captures the graph; trials replay it, timed with events on the stream.
    for (int t = 0; t < std::max(o.warmup, 2); ++t) run(active_slot(), dims);
    start = clock::now();
    result.warmup_seconds = std::chrono::duration<double>(start - warm_start).count();
    set_deadline(start + std::chrono::duration_cast<clock::duration>(o.timeout));
    Event begin, end;
    for (int t = 0; t < std::max(o.trials, 1); ++t) {
      if (clock::now() - start > o.timeout) {
        result.timed_out = true;
        break;
      }
      const int runs = std::max(o.runs_per_trial, 1);
      begin.record(s.stream());
      for (int i = 0; i < runs; ++i) {
        s.defer_wait = i + 1 < runs;
        run(active_slot(), dims);
      }
      s.defer_wait = false;
      end.record(s.stream());
      end.synchronize();
      best = std::min(best, Event::elapsed_ms(begin, end) * 1e-3 / runs);
    }
  } catch (const ProfileTimeout&) {
    s.defer_wait = false;
    result.timed_out = true;
    if (result.warmup_seconds == 0) result.warmup_seconds = std::chrono::duration<double>(clock::now() - warm_start).count();
  } catch (...) {
    s.defer_wait = false;
    set_deadline(std::nullopt);
    throw;
  }
  set_deadline(std::nullopt);
  result.seconds = best;
  return result;
}

}  // namespace luminal::cuda
