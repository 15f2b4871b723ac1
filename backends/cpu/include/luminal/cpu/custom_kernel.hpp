// A CustomOp that also implements cpu::CustomKernel runs natively on the CPU backend; any
// other CustomOp runs its host execute_reference there. (Backends implement custom ops this
// way: each declares its own interface, and a user's op inherits from CustomOp and from
// the interfaces of the backends it supports. docs/BACKENDS.md.)
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace luminal::cpu {

class CustomKernel {
 public:
  virtual ~CustomKernel() = default;
  // Inputs are contiguous row-major buffers of their nodes' dtypes and `input_shapes`; the
  // output buffer is allocated, of the node's dtype and `out_shape`.
  virtual void run_cpu(std::span<const void* const> inputs, std::span<const std::vector<int64_t>> input_shapes,
                       void* output, const std::vector<int64_t>& out_shape) const = 0;
};

}  // namespace luminal::cpu
