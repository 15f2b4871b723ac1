// Shared helpers for the tensor API implementation (not installed).
#pragma once

#include "luminal/error.hpp"
#include "luminal/tensor.hpp"

namespace luminal::detail {

int normalize_axis(int axis, size_t rank, const char* op);
std::vector<int> normalize_axes(std::vector<int> axes, size_t rank, const char* op);

// Append a node whose output is a fresh contiguous buffer of `shape`.
GraphTensor make_node(Graph& g, Node node);
// Primitive wrappers. `unary` promotes ints to F32; `binary` broadcasts and promotes.
GraphTensor unary(OpKind op, const GraphTensor& x);
GraphTensor binary(OpKind op, const GraphTensor& a, const GraphTensor& b);
GraphTensor reduce(OpKind op, const GraphTensor& x, int axis);
// Ints and Bool become F32 (PyTorch's default float); floats are unchanged.
GraphTensor to_float(const GraphTensor& x);
// Both operands broadcast to a common shape and promoted to a common dtype.
std::pair<GraphTensor, GraphTensor> broadcast_pair(const GraphTensor& a, const GraphTensor& b);
// A scalar tensor holding an Expression's value (I32), e.g. a symbolic dim size.
GraphTensor expr_scalar(Graph& g, const Expression& value, DType dtype = DType::I32);
// Same-dtype cast: materialises a view into a contiguous buffer.
GraphTensor copy(const GraphTensor& x);

}  // namespace luminal::detail
