// The memory planner: buffer lifetimes over a program, packed into one arena.
//
// A buffer is live over an inclusive range of steps [first, last]. Two buffers whose
// step ranges intersect must get disjoint byte ranges; buffers whose ranges do not
// intersect may share bytes (an intermediate that is dead before an output is written
// reuses the output's space). A plan is sized once for the upper end of each dynamic
// dim's bucket, so every execution inside the bucket fits.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "luminal/expression.hpp"
#include "luminal/graph.hpp"

namespace luminal::plan {

inline constexpr int64_t kNotInArena = -1;

struct BufferUse {
  int64_t bytes = 0;
  int32_t first = 0, last = 0;  // step indices, inclusive
  // >= 0: this buffer is buffer `alias_of`'s storage (an in-place op writes its result
  // over its input). Chains resolve to their root; the root's bytes stay reserved over
  // the union of the group's lifetimes, sized for the largest member.
  int32_t alias_of = -1;
};

struct MemoryPlan {
  std::vector<int64_t> offsets;  // byte offset of each buffer in the arena (kNotInArena: not placed)
  int64_t arena_bytes = 0;       // peak: the arena size the plan needs
  int64_t naive_bytes = 0;       // one private allocation per buffer (aliases share), aligned
  int64_t live_peak_bytes = 0;   // max over steps of the aligned bytes live at once: no packing beats it
};

// Greedy by size with best fit: buffers (alias groups) are placed largest first; each
// goes into the smallest gap, among the buffers already placed whose lifetimes
// intersect its own, that holds it, else directly above the highest of them.
// Why: placing large buffers first keeps them at low offsets where they do not split
// the arena, and small buffers fill the holes between them; on inference graphs this
// is within a few percent of the live-bytes lower bound (TFLite's "greedy by size"
// strategy). Deterministic: ties break on first step, then on index.
// Offsets are multiples of `alignment` (a power of two). Zero-byte buffers get offset 0.
// Throws luminal::Error on negative sizes, inverted lifetimes, bad or cyclic aliases.
MemoryPlan pack(std::span<const BufferUse> buffers, int64_t alignment = 64);

// The arena buffers of a program: uses[i] is the buffer of node nodes[i].
struct ProgramBuffers {
  std::vector<BufferUse> uses;
  std::vector<NodeId> nodes;
};

// May `node` write its result over the buffer of its input `input` (an in-place op)?
// Say yes only when the kernel of `node` reads each element of `input`, through any
// fused path, before or at the position where it writes the same element (elementwise
// ops over identical contiguous views). The planner adds the rest: `input` has an arena
// buffer at least as large, is not an Output, `node` is its last reader, and no other
// node already took it over.
using InPlace = std::function<bool(NodeId node, NodeId input)>;

// Lifetimes of the buffers of a program Graph (nodes in topological order; step = node
// index). Inputs (user or persisted data) are not in the arena. Outputs are, and live
// to the last step. Every other node for which `needs_buffer(id)` holds lives from its
// own step to the step of its last reader. A node without a buffer is computed inside
// its consumers (fused), so its own inputs are read when those consumers run: reads
// through it count at its consumers' steps. Sizes are dtype bytes x numel with every
// symbolic dim evaluated at `upper_dims`; a dim missing there throws luminal::Error.
// With `in_place`, a node may take over an input's buffer (BufferUse::alias_of). Nodes for
// which `lives_elsewhere` holds (Outputs included) run at their own step but own no arena
// buffer: their value is written in a buffer outside it (a state updated in place).
ProgramBuffers program_buffers(const Graph& program, const DimMap& upper_dims,
                               const std::function<bool(NodeId)>& needs_buffer, const InPlace& in_place = {},
                               const std::function<bool(NodeId)>& lives_elsewhere = {});

// pack(program_buffers(...)), with offsets indexed by NodeId (kNotInArena for nodes
// outside the arena).
MemoryPlan plan_program(const Graph& program, const DimMap& upper_dims,
                        const std::function<bool(NodeId)>& needs_buffer, int64_t alignment = 64,
                        const InPlace& in_place = {});

// One line for logs: "arena 1.50 MiB (naive 4.00 MiB, live peak 1.50 MiB, 37.5% of naive)".
std::string summary(const MemoryPlan& plan);

}  // namespace luminal::plan
