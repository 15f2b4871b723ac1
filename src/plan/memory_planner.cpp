// Placeholder packing (each buffer at its own offset); replaced by the real planner.
#include "luminal/plan/memory_planner.hpp"

namespace luminal::plan {

MemoryPlan pack(std::span<const BufferUse> buffers, int64_t alignment) {
  MemoryPlan p;
  for (const auto& b : buffers) {
    p.offsets.push_back(p.arena_bytes);
    int64_t sz = (b.bytes + alignment - 1) / alignment * alignment;
    p.arena_bytes += sz;
    p.naive_bytes += sz;
  }
  return p;
}

MemoryPlan plan_program(const Graph& program, const DimMap& upper_dims, const std::function<bool(NodeId)>& needs_buffer,
                        int64_t alignment) {
  std::vector<BufferUse> uses;
  for (NodeId i = 0; i < program.size(); ++i) {
    const Node& n = program.node(i);
    if (!needs_buffer(i)) { uses.push_back({0, 0, 0, -1}); continue; }
    auto numel = product(n.shape).try_eval(upper_dims);
    uses.push_back({numel.value_or(0) * static_cast<int64_t>(dtype_bytes(n.dtype)), static_cast<int32_t>(i),
                    static_cast<int32_t>(program.size()), -1});
  }
  return pack(uses, alignment);
}

}  // namespace luminal::plan
