#include "luminal/search/segments.hpp"

#include <algorithm>
#include <unordered_map>

#include "luminal/error.hpp"

namespace luminal::search {
namespace {

// Do nodes i and j (= i + period) do the same thing, reading corresponding inputs?
bool same_role(const Graph& g, NodeId i, NodeId j) {
  const Node& a = g.node(i);
  const Node& b = g.node(j);
  if (a.op != b.op || a.dtype != b.dtype || a.shape != b.shape || a.axis != b.axis || a.persist != b.persist ||
      a.custom != b.custom || a.inputs.size() != b.inputs.size())
    return false;
  if (a.op == OpKind::Constant && !(a.constant == b.constant || (a.constant != a.constant && b.constant != b.constant)))
    return false;
  if (a.op == OpKind::Iota && !(a.iota_expr == b.iota_expr)) return false;
  auto corresponds = [&](NodeId x, NodeId y) {
    if (x == kNoNode || y == kNoNode) return x == y;
    return x == y || (i >= x && j >= y && i - x == j - y);
  };
  if (!corresponds(a.updates, b.updates)) return false;
  for (size_t k = 0; k < a.inputs.size(); ++k) {
    if (!(a.inputs[k].view == b.inputs[k].view)) return false;
    if (!corresponds(a.inputs[k].node, b.inputs[k].node)) return false;
  }
  return true;
}

bool same_layout(const Graph& a, const Graph& b) {
  if (a.size() != b.size()) return false;
  for (NodeId i = 0; i < a.size(); ++i) {
    const Node& x = a.node(i);
    const Node& y = b.node(i);
    if (x.op != y.op || x.inputs.size() != y.inputs.size()) return false;
    for (size_t k = 0; k < x.inputs.size(); ++k)
      if (x.inputs[k].node != y.inputs[k].node) return false;
  }
  return true;
}

}  // namespace

std::optional<RepeatedBlock> find_repeated_block(const Graph& g, NodeId min_period) {
  const NodeId n = static_cast<NodeId>(g.size());
  // A cheap per-node signature filters almost every pair before the full comparison.
  std::vector<uint64_t> sig(n);
  for (NodeId i = 0; i < n; ++i) {
    const Node& node = g.node(i);
    uint64_t h = static_cast<uint64_t>(node.op) * 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(node.dtype) << 8 ^
                 node.inputs.size() << 16;
    for (const auto& d : node.shape) h = h * 31 + d.hash();
    sig[i] = h;
  }
  std::optional<RepeatedBlock> best;
  int64_t best_cover = 0;
  for (NodeId period = std::max<NodeId>(min_period, 1); period <= n / 2; ++period) {
    NodeId run_start = 0, run = 0;
    for (NodeId i = 0; i + period <= n; ++i) {
      bool eq = i + period < n && sig[i] == sig[i + period] && same_role(g, i, i + period);
      if (eq) {
        if (run == 0) run_start = i;
        ++run;
        continue;
      }
      if (run >= period) {
        int count = static_cast<int>(run / period) + 1;
        int64_t cover = static_cast<int64_t>(count) * period;
        if (cover > best_cover) {
          best_cover = cover;
          best = RepeatedBlock{run_start, period, count};
        }
      }
      run = 0;
    }
  }
  return best;
}

Segment make_segment(const Graph& g, NodeId begin, NodeId end) {
  Segment s;
  // The representative dims travel with the segment: extraction costs read them.
  for (const auto& [name, value] : g.dim_map()) s.graph.set_dim(name, value);
  std::unordered_map<NodeId, NodeId> local;  // original -> segment node
  auto add = [&](Node n, NodeId original, NodeId source) {
    NodeId id = s.graph.add_node(std::move(n));
    s.original.push_back(original);
    s.boundary_source.push_back(source);
    return id;
  };
  auto value = [&](NodeId orig) -> NodeId {
    if (auto it = local.find(orig); it != local.end()) return it->second;
    const Node& src = g.node(orig);
    if (src.op == OpKind::Input) {
      // A graph input made in an earlier segment's range (a layer's weights created before
      // the layer boundary) is read here as itself, not exported by that segment: an 8B
      // layer's MLP weights left it as three 117 MB outputs that every verification read
      // back and compared (35 of a 49 s compile).
      Node in = src;
      in.updates = kNoNode;
      NodeId id = add(std::move(in), orig, kNoNode);
      local[orig] = id;
      return id;
    }
    Node in;
    in.op = OpKind::Input;
    in.dtype = src.dtype;
    in.shape = src.shape;
    in.label = "boundary:" + std::to_string(orig);
    NodeId id = add(std::move(in), kNoNode, orig);
    local[orig] = id;
    return id;
  };
  for (NodeId i = begin; i < end; ++i) {
    Node n = g.node(i);
    for (auto& in : n.inputs) in.node = value(in.node);
    n.updates = kNoNode;  // resolved when stitching, through `original`
    local[i] = add(std::move(n), i, kNoNode);
  }
  // Values that leave the segment get a boundary Output.
  std::vector<bool> escapes(end - begin, false);
  for (NodeId i = end; i < g.size(); ++i) {
    const Node& n = g.node(i);
    for (const auto& in : n.inputs)
      if (in.node >= begin && in.node < end) escapes[in.node - begin] = true;
  }
  for (NodeId i = begin; i < end; ++i) {
    if (!escapes[i - begin] || g.node(i).op == OpKind::Input) continue;  // later segments read inputs as themselves
    Node out;
    out.op = OpKind::Output;
    out.dtype = g.node(i).dtype;
    out.shape = g.node(i).shape;
    out.label = "boundary:" + std::to_string(i);
    out.inputs = {{local.at(i), ShapeTracker::contiguous(out.shape)}};
    add(std::move(out), kNoNode, i);  // boundary_source of a boundary Output: the value it exports
  }
  return s;
}

std::pair<Graph, std::vector<NodeId>> compile_by_segments(
    const Graph& g, const std::function<SegmentProgram(const Graph& segment)>& compile_segment,
    std::optional<RepeatedBlock> block) {
  const NodeId n = static_cast<NodeId>(g.size());
  struct Range { NodeId begin, end; bool block_copy; };
  std::vector<Range> ranges;
  if (block && block->count >= 2) {
    NodeId end = block->start + block->period * static_cast<NodeId>(block->count);
    if (block->start > 0) ranges.push_back({0, block->start, false});
    for (int c = 0; c < block->count; ++c)
      ranges.push_back({block->start + block->period * static_cast<NodeId>(c),
                        block->start + block->period * static_cast<NodeId>(c + 1), true});
    if (end < n) ranges.push_back({end, n, false});
  } else {
    ranges.push_back({0, n, false});
  }

  Graph out;
  std::vector<NodeId> external;
  std::vector<NodeId> value_of(n, kNoNode);  // original node -> program node holding its value
  std::vector<std::pair<NodeId, NodeId>> pending_updates;  // (program Output, original Input)
  std::optional<SegmentProgram> block_program;
  Graph block_segment;

  auto emit = [&](Node node, NodeId ext) {
    NodeId id = out.add_node(std::move(node));
    external.push_back(ext);
    return id;
  };

  for (const Range& r : ranges) {
    Segment seg = make_segment(g, r.begin, r.end);
    SegmentProgram fresh;
    const SegmentProgram* prog;
    // Copies share the first copy's program when their segments line up node for node.
    if (r.block_copy && block_program && same_layout(seg.graph, block_segment)) {
      prog = &*block_program;
    } else if (r.block_copy && !block_program) {
      block_segment = seg.graph;
      block_program = compile_segment(seg.graph);
      prog = &*block_program;
    } else {
      fresh = compile_segment(seg.graph);
      prog = &fresh;
    }
    const Graph& p = prog->program;
    LUMINAL_ASSERT(prog->io_of.size() == p.size(), "io_of must cover the program");
    std::vector<NodeId> map(p.size(), kNoNode);
    for (NodeId q = 0; q < p.size(); ++q) {
      const Node& pn = p.node(q);
      if (pn.op == OpKind::Input) {
        NodeId sn = prog->io_of[q];
        LUMINAL_ASSERT(sn != kNoNode && sn < seg.graph.size(), "program input without a segment node");
        if (NodeId src = seg.boundary_source[sn]; src != kNoNode) {
          LUMINAL_ASSERT(value_of[src] != kNoNode, "boundary value ", src, " not produced before use");
          map[q] = value_of[src];
        } else if (NodeId orig = seg.original[sn]; value_of[orig] != kNoNode) {
          map[q] = value_of[orig];  // a graph input an earlier segment also read
        } else {
          Node in = g.node(orig);
          map[q] = emit(std::move(in), orig);
          value_of[orig] = map[q];
        }
        continue;
      }
      Node node = pn;
      for (auto& in : node.inputs) in.node = map[in.node];
      if (pn.op == OpKind::Output) {
        NodeId sn = prog->io_of[q];
        LUMINAL_ASSERT(sn != kNoNode, "program output without a segment node");
        NodeId orig = seg.original[sn];
        if (orig == kNoNode) {  // boundary output: its value feeds later segments
          NodeId exported = seg.boundary_source[sn];
          const NodeInput& in = node.inputs[0];
          bool direct = in.view.is_contiguous() && out.node(in.node).shape == in.view.shape();
          if (direct) {
            value_of[exported] = in.node;
          } else {
            Node copy;
            copy.op = OpKind::Cast;
            copy.dtype = node.dtype;
            copy.shape = node.shape;
            copy.inputs = {in};
            value_of[exported] = emit(std::move(copy), kNoNode);
          }
          continue;
        }
        node.updates = kNoNode;
        map[q] = emit(std::move(node), orig);
        value_of[orig] = map[q];
        if (g.node(orig).updates != kNoNode) pending_updates.emplace_back(map[q], g.node(orig).updates);
        continue;
      }
      map[q] = emit(std::move(node), kNoNode);
    }
  }
  for (auto [output, target] : pending_updates) {
    LUMINAL_ASSERT(value_of[target] != kNoNode, "state input ", target, " missing from the program");
    out.mutable_node(output).updates = value_of[target];
  }
  return {std::move(out), std::move(external)};
}

}  // namespace luminal::search
