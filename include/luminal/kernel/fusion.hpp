// Fusion rules, generated from the op categories of ops.def: a new primitive needs no
// new fusion rule. They put (Fused dtype shape region inputs) next to every elementwise
// op and reduction, and grow it over its producers: elementwise chains, and a reduction
// with its producers and consumers (softmax, norms). `region` is a serialized
// kernel::Region; `inputs` lists the region's external inputs (read contiguously: the
// region applies the views itself). A fusion that cannot be lowered to one kernel is
// never built (the `fuse-op` guard fails).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "luminal/kernel/kernel.hpp"

namespace luminal::egraph { class EGraph; }

namespace luminal::kernel {

// Rule-file text: declares the backend op `Fused` and the rule set `ruleset`.
std::string fusion_rules(std::string_view ruleset = "fuse");
// Writes fusion_rules() to a file (once per process and text) and returns its path, for
// Runtime::rule_files().
std::string fusion_rule_file(std::string_view ruleset = "fuse");
// The host primitive the rules call: (fuse-op "Op" dtype shape axis [region dtype shape view]...)
// -> the fused region's serialization; region "" is a fresh input.
void register_fusion_primitives(egraph::EGraph& eg);

// The region of a `Fused` backend op node (parsed once per distinct string).
std::shared_ptr<const Region> fused_region(const Node& fused);

// Greedy fusion of an extracted program, for a backend that runs regions as kernels: a
// group of fusable nodes (elementwise, reductions, Gather, Constant, Iota and Fused
// regions) whose results are read only inside the group becomes one Fused node, when
// `lower` accepts the merged region (a group it refuses keeps its nodes). The fusion
// rules leave long chains cut (their regions are capped so the e-graph stays small:
// GELU's erf is ~150 nodes); this joins what the extracted program leaves apart. An Iota
// or Constant read by several kernels is copied into each (it is recomputed from the loop
// indexes, never loaded), and runs on its own only for a reader that stays unfused.
// `old_to_new[i]` is the new id of program node i (kNoNode when it was absorbed).
struct FuseOptions {
  // A Scatter roots a group: the producers of its rows (a KV-cache append's RoPE) and of
  // its indexes compute inside the scatter kernel, whose rows are written where they
  // belong. For a runtime that spreads an in-place scatter over many blocks (CUDA); the
  // CPU runs a scatter as one outer iteration, where a fused producer would run serially.
  bool scatter_roots = false;
  // A Fused region with no inputs made of index arithmetic alone (Iota, Constant, Add,
  // Mul, Mod, LessThan, Cast: a scatter's indexes, a causal mask) is copied into each
  // reader as an Iota is, instead of running as its own kernel. Regions with a
  // transcendental (RoPE's sin tables) stay materialised: recomputing them per element
  // of every reader costs more than reading them.
  bool recompute_index_regions = false;
};
Graph fuse_program(const Graph& program, std::vector<NodeId>& old_to_new, const FuseOptions& options = {});

}  // namespace luminal::kernel
