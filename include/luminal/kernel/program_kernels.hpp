// What every backend that runs programs through the kernel IR needs to know about a
// program node, shared by the CPU and CUDA runtimes: the region a node computes as a
// kernel, the copy kernel that materialises a view, and the layout of a matmul-shaped
// Mul's operands (how a GEMM library reads them without copies).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "luminal/graph.hpp"
#include "luminal/kernel/fusion.hpp"

namespace luminal::kernel {

// A program as a backend runs it: `fuse_program` applied (nodes the extracted program left
// apart joined where one kernel computes them), the external ids carried to the fused
// nodes, every dim it mentions (sorted), and the node of each external Input/Output.
// Asserts the topological order every runtime relies on.
struct RunnableProgram {
  Graph graph;
  std::vector<NodeId> external_ids;               // per node of `graph` (kNoNode: internal)
  std::vector<std::string> dim_names;             // sorted
  std::unordered_map<NodeId, NodeId> program_of;  // external id -> node of `graph`
};
RunnableProgram runnable_program(const Graph& program, const std::vector<NodeId>& external_ids,
                                 const FuseOptions& fusion = {});

// Products that read the same operand (an attention block's q, k and v projections; an
// MLP's gate and up) can run as one call when they are adjacent in the program: then no
// step runs between them, and the memory planner (lifetimes are step ranges) never lets
// one's output reuse bytes a step between them reads or writes. This moves each later
// node that `siblings(first, later)` accepts, with the Inputs it reads (which depend on
// nothing), up to just after the first; a node whose other inputs are not computed by
// then stays. Every other node keeps its order. Returns whether anything moved.
bool adjoin_siblings(RunnableProgram& r, const std::function<bool(const Node& first, const Node& later)>& siblings);

struct Kernel;

// A state update run in place: node `scatter` (its kernel `k` copies input `state` whole,
// then writes rows) produces the new value of persisted input `state`, which the update
// Output `output` would copy back. When nothing else reads `state`, the runtime may make
// the scatter's output buffer the state's own: the copy phase is then skipped (the kernel
// checks), only the new rows are written, and the Output's copy back is void. A KV-cache
// append then moves the appended rows instead of the whole cache twice.
struct InPlaceUpdate {
  NodeId scatter = kNoNode, state = kNoNode, output = kNoNode;
};
std::optional<InPlaceUpdate> in_place_update(const Graph& g, NodeId node, const Kernel& k);

// The region a program node computes, as text: a Fused op carries one; any other op that
// runs as a kernel is a region of that op alone (an Output is a copy through its view).
// nullopt for Input, CustomOp and other backend ops. `backend` names the caller in errors.
std::optional<std::string> node_region_text(const Graph& g, const Node& n, std::string_view backend);

// The region copying an operand (of `dtype`, buffer shape `shape`) through `view` into a
// contiguous buffer, converted to `out_dtype` when given (a half-precision weight widened
// for a library that cannot mix operand types).
std::string copy_region_text(DType dtype, const Shape& shape, const ShapeTracker& view, std::string_view backend,
                             std::optional<DType> out_dtype = std::nullopt);

// One matmul operand, read through its view at the Mul's shape [batch?, m, n, k]: either
// directly (every axis a linear stride) or, when the view is not linear (a reshape of
// merged dims), after a copy kernel writes it contiguously.
struct GemmOperand {
  bool copy = false;
  Expression offset = 0, row = 0, col = 0, batch = 0;  // element strides (row: m or k, col: k or n)
  std::vector<Expression> outer;                        // strides of the batch axes before `batch`
  // The view without the Mul's broadcast axis: a copy through it is the operand packed
  // ([batch?, m, k] for A, [batch?, n, k] for B). Filled for every operand, so a backend
  // may also copy a linear operand whose strides its library cannot take.
  ShapeTracker copy_view;
};
// Rank 3 ([m, n, k]), 4 ([batch, m, n, k]) or more: the axes before `batch` are outer
// batch axes (attention's [kv_heads, group, ...]), which a backend runs as a loop around
// its GEMM (or refuses: `outer` non-empty).
struct GemmLayout {
  int rank = 0;
  Expression batch = 1, m, n, k;
  std::vector<Expression> outer;  // sizes of the outer batch axes
  GemmOperand a, b;  // a: rows m, cols k; b: rows k, cols n
};

// The layout of SumReduce(k) of Mul(a through va, b through vb) in [outer..., batch?, m,
// n, k] space (rank >= 3, A broadcast along n, B along m); nullopt when it is not one.
std::optional<GemmLayout> gemm_layout(const ShapeTracker& va, const ShapeTracker& vb);

}  // namespace luminal::kernel
