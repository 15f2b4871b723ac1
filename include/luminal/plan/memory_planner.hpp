// The memory planner: buffer lifetimes over a program, packed into one arena.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "luminal/graph.hpp"

namespace luminal::plan {

struct BufferUse {
  int64_t bytes = 0;
  int32_t first = 0, last = 0;  // step indices, inclusive
  int32_t alias_of = -1;        // this buffer is another buffer's storage (in-place op)
};
struct MemoryPlan {
  std::vector<int64_t> offsets;
  int64_t arena_bytes = 0;
  int64_t naive_bytes = 0;
};
MemoryPlan pack(std::span<const BufferUse> buffers, int64_t alignment = 64);
MemoryPlan plan_program(const Graph& program, const DimMap& upper_dims, const std::function<bool(NodeId)>& needs_buffer,
                        int64_t alignment = 64);

}  // namespace luminal::plan
