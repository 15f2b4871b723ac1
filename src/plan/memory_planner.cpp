#include "luminal/plan/memory_planner.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <numeric>

#include "luminal/error.hpp"

namespace luminal::plan {
namespace {

int64_t align_up(int64_t bytes, int64_t alignment) {
  LUMINAL_CHECK(bytes <= std::numeric_limits<int64_t>::max() - alignment, "memory planner: buffer of ", bytes,
                " bytes is too large to align");
  return (bytes + alignment - 1) & ~(alignment - 1);
}

// An alias group: every buffer sharing one root's storage.
struct Group {
  int64_t bytes = 0;  // aligned, largest member
  int32_t first = 0, last = 0;
  bool used = false;
};

// A placed group, kept in a list sorted by offset.
struct Placed {
  int64_t offset, end;
  int32_t first, last;
};

bool lifetimes_meet(int32_t a_first, int32_t a_last, int32_t b_first, int32_t b_last) {
  return a_first <= b_last && b_first <= a_last;
}

int64_t live_peak(const std::vector<Group>& groups) {
  // Sweep over step boundaries: +bytes at first, -bytes after last. At equal steps the
  // release (last + 1) sorts before the acquire so back-to-back lifetimes do not add.
  std::vector<std::pair<int64_t, int64_t>> events;  // (step, delta)
  for (const Group& g : groups) {
    if (!g.used || g.bytes == 0) continue;
    events.emplace_back(g.first, g.bytes);
    events.emplace_back(int64_t{g.last} + 1, -g.bytes);
  }
  std::sort(events.begin(), events.end());
  int64_t live = 0, peak = 0;
  for (const auto& [step, delta] : events) {
    live += delta;
    peak = std::max(peak, live);
  }
  return peak;
}

}  // namespace

MemoryPlan pack(std::span<const BufferUse> buffers, int64_t alignment) {
  LUMINAL_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0,
                "memory planner: alignment must be a positive power of two, got ", alignment);
  const size_t n = buffers.size();
  LUMINAL_CHECK(n <= size_t{std::numeric_limits<int32_t>::max()}, "memory planner: too many buffers (", n, ")");
  for (size_t i = 0; i < n; ++i) {
    const BufferUse& b = buffers[i];
    LUMINAL_CHECK(b.bytes >= 0, "memory planner: buffer ", i, " has negative size ", b.bytes);
    LUMINAL_CHECK(b.first <= b.last, "memory planner: buffer ", i, " ends (step ", b.last, ") before it starts (step ",
                  b.first, ")");
    LUMINAL_CHECK(b.alias_of >= -1 && b.alias_of < static_cast<int64_t>(n) && b.alias_of != static_cast<int64_t>(i),
                  "memory planner: buffer ", i, " aliases ", b.alias_of, ", which is not another buffer");
  }

  // Resolve each alias chain to its root; a chain longer than n steps is a cycle.
  std::vector<int32_t> root(n);
  for (size_t i = 0; i < n; ++i) {
    int32_t r = static_cast<int32_t>(i);
    for (size_t hops = 0; buffers[r].alias_of >= 0; ++hops) {
      LUMINAL_CHECK(hops < n, "memory planner: buffer ", i, " is part of an alias cycle");
      r = buffers[r].alias_of;
    }
    root[i] = r;
  }
  std::vector<Group> groups(n);
  for (size_t i = 0; i < n; ++i) {
    Group& g = groups[root[i]];
    const BufferUse& b = buffers[i];
    const int64_t bytes = align_up(b.bytes, alignment);
    if (!g.used) {
      g = Group{bytes, b.first, b.last, true};
    } else {
      g.bytes = std::max(g.bytes, bytes);
      g.first = std::min(g.first, b.first);
      g.last = std::max(g.last, b.last);
    }
  }

  MemoryPlan plan;
  plan.offsets.assign(n, 0);
  for (const Group& g : groups) {
    if (g.used) {
      LUMINAL_CHECK(plan.naive_bytes <= std::numeric_limits<int64_t>::max() - g.bytes,
                    "memory planner: total size overflows");
      plan.naive_bytes += g.bytes;
    }
  }
  plan.live_peak_bytes = live_peak(groups);

  std::vector<int32_t> order;
  for (size_t i = 0; i < n; ++i) {
    if (groups[i].used && groups[i].bytes > 0) order.push_back(static_cast<int32_t>(i));
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    if (groups[a].bytes != groups[b].bytes) return groups[a].bytes > groups[b].bytes;
    if (groups[a].first != groups[b].first) return groups[a].first < groups[b].first;
    return a < b;
  });

  std::vector<Placed> placed;  // sorted by offset
  std::vector<int64_t> group_offset(n, 0);
  for (int32_t gi : order) {
    const Group& g = groups[gi];
    // Walk the conflicting buffers by offset. `cursor` is the lowest byte above every
    // conflicting buffer seen so far; a conflicting buffer starting above it bounds a gap.
    int64_t cursor = 0;
    int64_t best_offset = -1, best_gap = std::numeric_limits<int64_t>::max();
    for (const Placed& p : placed) {
      if (!lifetimes_meet(g.first, g.last, p.first, p.last)) continue;
      if (p.offset >= cursor) {
        const int64_t gap = p.offset - cursor;
        if (gap >= g.bytes && gap < best_gap) {
          best_gap = gap;
          best_offset = cursor;
        }
      }
      cursor = std::max(cursor, p.end);
    }
    const int64_t offset = best_offset >= 0 ? best_offset : cursor;
    LUMINAL_CHECK(offset <= std::numeric_limits<int64_t>::max() - g.bytes, "memory planner: arena size overflows");
    group_offset[gi] = offset;
    const Placed entry{offset, offset + g.bytes, g.first, g.last};
    placed.insert(std::upper_bound(placed.begin(), placed.end(), entry,
                                   [](const Placed& a, const Placed& b) { return a.offset < b.offset; }),
                  entry);
    plan.arena_bytes = std::max(plan.arena_bytes, entry.end);
  }
  for (size_t i = 0; i < n; ++i) plan.offsets[i] = group_offset[root[i]];
  return plan;
}

ProgramBuffers program_buffers(const Graph& program, const DimMap& upper_dims,
                               const std::function<bool(NodeId)>& needs_buffer, const InPlace& in_place,
                               const std::function<bool(NodeId)>& lives_elsewhere) {
  const size_t n = program.size();
  LUMINAL_CHECK(n <= size_t{std::numeric_limits<int32_t>::max()}, "memory planner: program too large (", n,
                " nodes)");
  std::vector<std::vector<NodeId>> consumers(n);
  for (NodeId id = 0; id < n; ++id) {
    for (const NodeInput& in : program.node(id).inputs) {
      LUMINAL_ASSERT(in.node < id, "program nodes must be in topological order: node ", id, " reads node ", in.node);
      consumers[in.node].push_back(id);
    }
  }
  std::vector<bool> in_arena(n);
  for (NodeId id = 0; id < n; ++id) {
    const OpKind op = program.node(id).op;
    in_arena[id] = op == OpKind::Output || (op != OpKind::Input && needs_buffer(id));
  }
  std::vector<bool> elsewhere(n, false);
  if (lives_elsewhere)
    for (NodeId id = 0; id < n; ++id) {
      elsewhere[id] = program.node(id).op != OpKind::Input && lives_elsewhere(id);
      if (elsewhere[id]) in_arena[id] = false;
    }
  // runs_at[c]: the step at which node c is actually computed. A node with its own
  // buffer runs at its own step; a fused node runs inside its latest consumer.
  std::vector<int32_t> runs_at(n);
  for (size_t k = n; k-- > 0;) {
    int32_t step = static_cast<int32_t>(k);
    if (!in_arena[k] && !elsewhere[k]) {
      for (NodeId c : consumers[k]) step = std::max(step, runs_at[c]);
    }
    runs_at[k] = step;
  }

  ProgramBuffers result;
  std::vector<int32_t> use_of(n, -1);    // index into result.uses
  std::vector<bool> hosts_alias(n, false);  // its buffer was taken over in place
  const int32_t last_step = n == 0 ? 0 : static_cast<int32_t>(n - 1);
  for (NodeId id = 0; id < n; ++id) {
    if (!in_arena[id]) continue;
    const Node& node = program.node(id);
    int64_t bytes = static_cast<int64_t>(dtype_bytes(node.dtype));
    for (size_t axis = 0; axis < node.shape.size(); ++axis) {
      const std::optional<int64_t> dim = node.shape[axis].try_eval(upper_dims);
      LUMINAL_CHECK(dim.has_value(), "memory planner: node ", id, " (", op_name(node.op), ") dim ", axis,
                    " cannot be evaluated; give every dynamic dim an upper value");
      LUMINAL_CHECK(*dim >= 0, "memory planner: node ", id, " dim ", axis, " is negative (", *dim, ")");
      LUMINAL_CHECK(!__builtin_mul_overflow(bytes, *dim, &bytes), "memory planner: node ", id,
                    " size overflows int64");
    }
    int32_t last = static_cast<int32_t>(id);
    if (node.op == OpKind::Output) {
      last = last_step;
    } else {
      for (NodeId c : consumers[id]) last = std::max(last, runs_at[c]);
    }
    BufferUse use{bytes, static_cast<int32_t>(id), last};
    if (in_place) {
      for (const NodeInput& in : node.inputs) {
        const NodeId p = in.node;
        if (use_of[p] < 0 || hosts_alias[p] || program.node(p).op == OpKind::Output) continue;
        const BufferUse& host = result.uses[static_cast<size_t>(use_of[p])];
        if (host.last != static_cast<int32_t>(id) || host.bytes < bytes || !in_place(id, p)) continue;
        use.alias_of = use_of[p];
        hosts_alias[p] = true;
        break;
      }
    }
    use_of[id] = static_cast<int32_t>(result.uses.size());
    result.uses.push_back(use);
    result.nodes.push_back(id);
  }
  return result;
}

MemoryPlan plan_program(const Graph& program, const DimMap& upper_dims,
                        const std::function<bool(NodeId)>& needs_buffer, int64_t alignment, const InPlace& in_place) {
  const ProgramBuffers buffers = program_buffers(program, upper_dims, needs_buffer, in_place);
  MemoryPlan packed = pack(buffers.uses, alignment);
  std::vector<int64_t> by_node(program.size(), kNotInArena);
  for (size_t i = 0; i < buffers.nodes.size(); ++i) by_node[buffers.nodes[i]] = packed.offsets[i];
  packed.offsets = std::move(by_node);
  return packed;
}

std::string summary(const MemoryPlan& plan) {
  auto mib = [](int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); };
  const double percent =
      plan.naive_bytes == 0 ? 100.0 : 100.0 * static_cast<double>(plan.arena_bytes) / static_cast<double>(plan.naive_bytes);
  char line[160];
  std::snprintf(line, sizeof line, "arena %.2f MiB (naive %.2f MiB, live peak %.2f MiB, %.1f%% of naive)",
                mib(plan.arena_bytes), mib(plan.naive_bytes), mib(plan.live_peak_bytes), percent);
  return line;
}

}  // namespace luminal::plan
