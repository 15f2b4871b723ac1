// HLIR <-> e-graph. Every primitive op of ops.def becomes one constructor of the
// datatype IR, generated from the op table:
//   (Op dtype:String shape:ExprList [payload] input:IR view:ExprList ...)
// where payload is Input/Output: i64 node id; Constant: f64; Iota: Expr;
// SumReduce/MaxReduce: i64 axis; CustomOp: i64 node id (inputs as an IList).
// Views are flattened ShapeTrackers (see encode_view), so rules can match strides.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "luminal/egraph/egraph.hpp"
#include "luminal/graph.hpp"

namespace luminal::search {

egraph::Value encode_view(const ShapeTracker& view);
ShapeTracker decode_view(const egraph::Value& v);

struct Signature;  // constructor ids of the IR datatype

struct LoweredGraph {
  std::unique_ptr<egraph::EGraph> egraph;
  std::shared_ptr<const Signature> signature;
  std::vector<egraph::ClassId> class_of;  // per HLIR node
  std::vector<egraph::ClassId> roots;     // one per Output node, in node order
  const Graph* source = nullptr;          // for CustomOp payloads
};

// Declare the IR signature and host primitives, then add every node of `g`.
LoweredGraph lower_to_egraph(const Graph& g);

// Paths of the core rule files (always sound algebra over the primitives).
std::vector<std::string> core_rule_files();

// The e-classes a search chooses in: reachable from the roots, more than one live
// e-node. Deterministic order.
struct ChoiceSpace {
  std::vector<egraph::ClassId> slots;
  std::vector<std::vector<egraph::NodeId>> options;  // per slot, ascending e-node id
  std::vector<int> slot_of;                          // canonical class -> slot or -1
  size_t reachable_classes = 0;
};
ChoiceSpace choice_space(const LoweredGraph& lowered);

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
