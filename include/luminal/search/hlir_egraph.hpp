// HLIR <-> e-graph. Every primitive op of ops.def becomes one constructor of the
// datatype IR, generated from the op table:
//   (Op dtype:String shape:ExprList [payload] input:IR view:ExprList ...)
// where payload is Input/Output: i64 node id; Constant: f64; Iota: Expr;
// SumReduce/MaxReduce/Gather/Scatter: i64 axis (-1: none); CustomOp: i64 node id (inputs as an IList).
// Views are flattened ShapeTrackers (see encode_view), so rules can match strides.
// Backend ops are IR constructors that a backend's rule file declares (see
// luminal/backend_op.hpp for the convention); load_rule_files validates them.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "luminal/egraph/egraph.hpp"
#include <functional>
#include "luminal/graph.hpp"

namespace luminal::search {

egraph::Value encode_view(const ShapeTracker& view);
// The element stride of a view axis whose offset is linear in its index (stride * z + c)
// and which has no padding; nullopt otherwise.
std::optional<Expression> view_axis_stride(const ViewDim& d);
ShapeTracker decode_view(const egraph::Value& v);

struct Signature;  // constructor ids of the IR datatype

// How a backend op's constructor lays out its arguments (validated at load).
struct BackendOpLayout {
  std::string name;
  std::vector<egraph::ValueKind> attrs;  // arguments 2 .. 2+attrs.size()
  size_t first_input = 0;                // argument index of the first input
  bool input_list = false;               // one IList argument instead of (IR ExprList) pairs
};

struct LoweredGraph {
  std::unique_ptr<egraph::EGraph> egraph;
  std::shared_ptr<const Signature> signature;
  std::vector<egraph::ClassId> class_of;  // per HLIR node
  std::vector<egraph::ClassId> roots;     // one per Output node, in node order
  const Graph* source = nullptr;          // for Input/Output/CustomOp payloads
  std::unordered_map<egraph::OpId, BackendOpLayout> backend_ops;  // by constructor
};

// Declare the IR signature and host primitives, then add every node of `g`.
// `register_primitives` lets a backend add host primitives for its rule guards.
LoweredGraph lower_to_egraph(const Graph& g,
                             const std::function<void(egraph::EGraph&)>& register_primitives = {});

// Load rule files into the lowered e-graph and validate every backend op they declare:
// a declaration that breaks the convention is a luminal::Error naming file and line.
void load_rule_files(LoweredGraph& lowered, const std::vector<std::string>& files);

// Paths of the core rule files (always sound algebra over the primitives).
std::vector<std::string> core_rule_files();

// A structural fingerprint of a graph: equal for graphs with the same ops, payloads,
// shapes, views and edges (labels included). Used to deduplicate candidate programs and
// to reuse a saturated e-graph across dim buckets.
uint64_t structural_hash(const Graph& g);

// The e-classes a search chooses in: reachable from the roots, more than one live
// e-node. Deterministic order.
struct ChoiceSpace {
  std::vector<egraph::ClassId> slots;
  std::vector<std::vector<egraph::NodeId>> options;  // per slot, ascending e-node id
  std::vector<int> slot_of;                          // canonical class -> slot or -1
  size_t reachable_classes = 0;
};
// Only extractable e-nodes are options (a known op whose inputs can all be extracted):
// a choice that cannot become a program is never offered to the search.
ChoiceSpace choice_space(const LoweredGraph& lowered);

// A backend's own estimate for one node of its op `name` writing `shape` (evaluated at the
// bucket's dims), in the units of the default below; nullopt keeps the default. For an op
// whose cost the elements it writes do not tell (attention reads every key per output row).
using BackendOpCost = std::function<std::optional<double>(std::string_view name, std::span<const int64_t> shape)>;

// The genome that picks, in every slot, the option of least total constructor :cost
// (primitives cost 1; a backend op's declaration sets its own), each scaled by the elements
// it writes at `dims` (default: the source graph's representative dims), so each dim
// bucket gets the cheapest program for its own sizes. `op_cost`, when set, may replace a
// backend op's scaled cost.
std::vector<uint32_t> cheapest_genome(const LoweredGraph& lowered, const ChoiceSpace& space,
                                      const DimMap* dims = nullptr, const BackendOpCost& op_cost = {});
// The genome of the unrewritten program: every slot picks the source graph's own node.
std::vector<uint32_t> source_genome(const LoweredGraph& lowered, const ChoiceSpace& space);

// Extract the program chosen by `genome` (one option index per slot). Returns nullopt
// when the choice is cyclic and cannot be repaired. `io_of` maps program Input/Output
// nodes to the source graph's node ids.
struct Extracted {
  Graph program;
  std::vector<NodeId> io_of;
};
std::optional<Extracted> extract(const LoweredGraph& lowered, const ChoiceSpace& space,
                                 const std::vector<uint32_t>& genome);

}  // namespace luminal::search
