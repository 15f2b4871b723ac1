// Repeated structure: a model with 32 identical layers is searched as one layer.
//
// find_repeated_block looks for the longest run of consecutive, structurally identical
// node ranges (identical ops, payloads and views; inputs at the same relative offset or
// the same shared node; Input labels ignored). The graph is then cut into segments
// (prefix, one block per copy, suffix); each distinct segment is searched once and the
// programs are stitched back together, the block's program instantiated per copy.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "luminal/graph.hpp"

namespace luminal::search {

struct RepeatedBlock {
  NodeId start = 0;   // first node of the first copy
  NodeId period = 0;  // nodes per copy
  int count = 0;      // number of copies
};
std::optional<RepeatedBlock> find_repeated_block(const Graph& g, NodeId min_period = 8);

// A standalone piece of the graph. Boundary inputs/outputs are Input/Output nodes that
// stand for values crossing the cut. A graph Input is never a boundary value: every
// segment that reads it holds a copy of it (original = the Input), and none exports it.
struct Segment {
  Graph graph;
  // For each node of `graph`: the original node it copies (kNoNode for boundary Outputs).
  std::vector<NodeId> original;
  // For boundary Inputs: the original node whose value they receive (else kNoNode).
  std::vector<NodeId> boundary_source;
};

// Cut nodes [begin, end) of `g` into a standalone segment.
Segment make_segment(const Graph& g, NodeId begin, NodeId end);

// A searched segment: its program plus, for each program node, the segment node it
// stands for when that is an Input or Output (kNoNode otherwise).
struct SegmentProgram {
  Graph program;
  std::vector<NodeId> io_of;  // program node -> segment node, for Input/Output nodes
};

// Lower `g` segment by segment with `compile_segment` (called once per distinct
// segment), and stitch the programs into one. Returns the program and, per program
// node, the user graph's NodeId for Input/Output nodes (kNoNode otherwise).
std::pair<Graph, std::vector<NodeId>> compile_by_segments(
    const Graph& g, const std::function<SegmentProgram(const Graph& segment)>& compile_segment,
    std::optional<RepeatedBlock> block);

}  // namespace luminal::search
