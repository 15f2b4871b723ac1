// The kernel IR shared by backends (docs/KERNEL_IR.md).
//
// A Region is a fused piece of HLIR: a small Graph whose Input nodes are the region's
// external inputs and whose single Output node is its result. `lower` turns it into a
// Kernel: a loop nest over index Expressions (rows x cols, reductions as inner loops
// with accumulators), built from typed statements. Emitters render a Kernel as C++ or
// CUDA C from one base emitter and a dialect table; text exists only at render time.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "luminal/graph.hpp"

namespace luminal::kernel {

// A fused region. Its Input nodes, in creation order, are the external inputs (in0,
// in1, ...); exactly one Output node is the result. Internal edges carry views.
struct Region {
  Graph graph;
};

// Deterministic, compact, one line (used as a String attribute in the e-graph).
std::string serialize(const Region& region);
// The inverse of serialize; malformed text throws luminal::Error.
Region parse_region(std::string_view text);

// One operand of a fusion step: an existing region (its result is the operand) or,
// when `region` is null, a fresh external input of `dtype` and `shape`.
// `view` is how the new op reads the operand.
struct FuseOperand {
  const Region* region = nullptr;
  DType dtype = DType::F32;
  Shape shape;
  ShapeTracker view;
};

// The region applying `op` (a Node used as a template: op, dtype, shape, axis,
// constant, iota_expr; its inputs are ignored) to `operands`. The new region's inputs
// are, in operand order, the operand region's inputs or the fresh input.
// nullopt when the result cannot be lowered to one kernel (see `lower`), or when a Gather
// would recompute a computed operand several times per element (`replicated_by_gather`).
std::optional<Region> fuse(const Node& op, std::span<const FuseOperand> operands);
// Does a Gather of `g` read `value` (a node of g) replicated: the Gather has at least twice
// the elements of its data, and its data is computed from `value`? Fused into that kernel,
// what computes `value` would run once per read (a convolution's im2col reads each element
// k*k times: MobileNet's batch norm and hardswish 25 times per element); materialised, once.
bool replicated_by_gather(const Graph& g, NodeId value);
// Does a Gather of `out` elements read data of `data` twice or more over (both known)?
bool gather_replicates(const Shape& out, const Shape& data);
// The same with every operand a fresh input (regions in operands are ignored).
std::optional<Region> singleton(const Node& op, std::span<const FuseOperand> operands);

// ---- the loop-nest IR ----

enum class StmtKind : uint8_t {
  Load,      // value = guard ? buffer[index] : 0
  Constant,  // value = constant (rounded to dtype)
  Index,     // value = index (an int64 Expression), converted to dtype
  Alu,       // value = op(args) for a Unary/Binary primitive (not Cast)
  Cast,      // value = args[0] converted to dtype (docs/OPS_SEMANTICS.md rules)
  Select,    // value = index ? args[0] : 0 (reads through a padded view); with three args: args[0] ? args[1] : args[2]
  Bound,     // int64 value = args[0]; when guard holds and it is outside [0, index), or (axis_size > 0) it lies on
             // the axis line through axis_base (a multiple of axis_stride away) at a coordinate outside
             // [0, axis_size): error, value 0
  Reduce,    // value = op (SumReduce/MaxReduce) over loop var r<loop> in [0, index) of args[0], computed by body
  Store,     // buffer[index] = args[0]
  Stash,     // row scratch `buffer`[index] = args[0] (a value a row reduction computes and the columns reuse)
  Unstash,   // value = row scratch `buffer`[index]
};

struct Stmt {
  StmtKind kind = StmtKind::Load;
  int value = -1;            // the value defined (v<value>); -1 for Store
  DType dtype = DType::F32;  // dtype of the value (Store: of the buffer)
  OpKind op = OpKind::Add;   // Alu: the primitive; Reduce: SumReduce or MaxReduce
  std::vector<int> args;     // operand values
  int buffer = -1;           // Load/Store: buffer slot (inputs in region order, then the output)
  Expression index = 0;      // Load/Store: element; Index: the value; Select: the condition; Reduce: extent; Bound: exclusive bound
  Expression guard = 1;      // Load: read only when nonzero; Alu (integer Mod) / Bound: report errors only when nonzero
  double constant = 0;       // Constant: the value; Bound: the KernelError code
  Expression position = 0;   // Bound: the flat position reported with the error (Kernel::bound_sites[site].positions)
  Expression axis_base = 0, axis_stride = 1, axis_size = 0;  // Bound: the user's axis (axis_size 0: none)
  int site = -1;             // Bound: its entry in Kernel::bound_sites
  int loop = -1;             // Reduce: its loop variable r<loop>
  std::vector<Stmt> body;    // Reduce: statements run per iteration; args[0] is defined there
};

// Loop variables inside index Expressions are the reserved names "$row", "$col",
// "$r<k>" (reduction loops) and "$v<id>" (an integer value, e.g. a gathered index);
// every other variable is a dynamic dim, read at run time from the dims array.
inline constexpr std::string_view kRowVar = "$row";
inline constexpr std::string_view kColVar = "$col";

// One pass over the output: for each row, `row_body` (per-row reductions, kept in
// locals) then, for each col, `col_body` (ends with the Store).
struct Phase {
  Expression rows = 1;
  Expression cols = 1;
  std::vector<Stmt> row_body;
  std::vector<Stmt> col_body;
  // Per-row scratch arrays of `cols` values (Stash/Unstash `buffer`), by value dtype: an
  // expensive value (exp2, log2, sin) a row reduction computes for every column is kept
  // for the column loop instead of being computed again.
  std::vector<DType> scratch;
  // A Scatter's first phase copies its destination, input buffer `copies_input`, whole
  // and unchanged into the output: when a runtime runs the scatter in place (the output
  // buffer is that input's, a KV cache), the phase is skipped (-1: never skipped).
  int copies_input = -1;
};

enum class Geometry : uint8_t {
  Elementwise,  // CUDA: one thread per (row, col); cols == 1
  WarpPerRow,   // CUDA: a warp per row; lanes split top-level reductions and the cols
  SingleBlock,  // CUDA: one block runs the phases in order (Scatter); C++: extent 1
  BlockPerRow,  // CUDA: a block per row (long rows: a decode step's norms); its threads split them
};

// Error codes written to the error slot (the caller zeroes it).
enum class KernelError : int32_t { None = 0, IntegerModByZero = 1, GatherOutOfRange = 2, ScatterOutOfRange = 3 };

// The error slot is a record of kErrorWords int32 words: [0] the KernelError code, [1] the
// bound site, [2, 3] the offending flat index (low, high 32 bits), [4, 5] its flat position.
// The first error claims the record (an atomic compare-and-swap on word 0); the caller
// zeroes at least word 0 before a launch and reads the record with describe_error.
inline constexpr int kErrorWords = 6;

// A Gather or Scatter whose indexes a kernel checks. Gather: `sizes` is the data's shape,
// `positions` the index's (the Gather's output) shape; Scatter: `sizes` is the destination's
// shape, `positions` the index's. `axis` is the user's axis (Node::axis), or -1 when the
// index is a flat one (then only [0, numel) is checked).
struct BoundSite {
  KernelError code = KernelError::GatherOutOfRange;
  int axis = -1;
  Shape sizes;
  Shape positions;
};

struct Kernel {
  std::vector<DType> inputs;            // buffer slots 0..n-1
  DType output = DType::F32;            // slot n
  Expression output_numel = 1;
  std::vector<std::string> dim_names;   // sorted; the order of the dims array
  std::vector<Phase> phases;            // run in order (more than one only for Scatter)
  std::vector<BoundSite> bound_sites;   // Bound statements' `site`
  Geometry geometry = Geometry::Elementwise;
  // C++: the entry point runs outer iterations [begin, end) of [0, extent).
  Expression extent = 1;
  // CUDA launch: grid_x blocks of block_x threads (one dim), dims passed at launch.
  Expression grid_x = 1;
  int block_x = 256;
  // BlockPerRow: the longest loop a row's threads share (its columns, or a top-level
  // reduction's extent, which may follow the dims: attention over p + s keys). A runtime
  // may launch another block size from its value (the kernel reads blockDim); block_x is
  // the size for the dims the kernel was lowered at.
  Expression row_extent = 1;
  // C++, elementwise: the rows run as (extent / row_block) blocks of row_block (the output's
  // static last dim), `$row` = block * row_block + i, so a read broadcast over the leading
  // dims (a bias at `$row % 1024`) is contiguous in i instead of a gather; 0: one loop.
  int64_t row_block = 0;
  size_t output_slot() const { return inputs.size(); }
  size_t error_slot() const { return inputs.size() + 1; }  // C++ buffers[] slot of the error record (kErrorWords int32)
};

// nullopt when the region cannot be one kernel without unbounded recomputation
// (a reduction needed per element, or recomputed for several rows), or holds an op no
// kernel computes (CustomOp, a Scatter that is not the result).
std::optional<Kernel> lower(const Region& region);
std::string to_string(const Kernel& kernel);
// `e` with the loop variable `var` (0 <= var < extent) divided by its extent folded:
// var % extent -> var, var / extent -> 0 (the simplifier cannot see loop bounds).
Expression fold_loop_extent(const Expression& e, const std::string& var, const Expression& extent);

// The message for an error record a launch of `kernel` filled (record[0] != 0), in the
// reference runtime's words: "gather: index 4 is out of range for dimension 0 of size 4
// (at position [1, 1] of the index)". `user_op` names the tensor-API op when known.
std::string describe_error(const Kernel& kernel, std::span<const int32_t> record, const DimMap& dims,
                           std::string_view user_op);

// C++: extern "C" void NAME(void* const* buffers, const int64_t* dims, int64_t begin, int64_t end)
//      extern "C" int64_t NAME_extent(const int64_t* dims)
std::string emit_cpp(const Kernel& kernel, std::string_view name);
// CUDA C: extern "C" __global__ void NAME(const T0* in0, ..., TO* out, int* err, const long long* dims)
std::string emit_cuda(const Kernel& kernel, std::string_view name);

// How many elements a thread of a CUDA elementwise kernel takes at once through 16-byte
// loads and stores (16 / the smallest element size among the output and the inputs read
// at the element's own index), or 1 where the kernel is not vectorized: another geometry,
// or an output not written at the element's own index. The runtime launches a thread per
// `width` elements.
int cuda_vector_width(const Kernel& kernel);
// How many consecutive columns (and iterations of its top-level reductions) a thread of a
// CUDA warp- or block-per-row kernel takes at once, copying the contiguous ones 16 bytes at
// a time; 1 where none is contiguous, or for another geometry. A runtime sizes a block for
// row_extent / this many chunks.
int cuda_row_chunk_width(const Kernel& kernel);

// The divisors of the kernel's floor divisions and modulos that depend on dims alone (not
// on a loop variable, and not constants, which the compiler divides by itself), in a fixed
// order. A CUDA kernel divides by each through a multiply (docs/KERNEL_IR.md).
std::vector<Expression> invariant_divisors(const Kernel& kernel);
// The values a CUDA launch of `kernel` passes in its dims array, in order: the dims of
// dim_names, then for each invariant divisor d the divisor and its multiplier
// ceil(2^62 / d), or 0 where d is outside [1, 2^31] (then the kernel divides).
std::vector<Expression> cuda_dims_entries(const Kernel& kernel);

}  // namespace luminal::kernel
