// The HLIR: a DAG of primitive ops (include/luminal/ops.def) over symbolic shapes.
//
// Every node produces one contiguous buffer of `shape`. Each input edge carries a
// ShapeTracker: the view the consumer reads the producer's buffer through, so
// permute/slice/broadcast/pad never move data.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "luminal/dtype.hpp"
#include "luminal/host_tensor.hpp"
#include "luminal/shape.hpp"

namespace luminal {

enum class OpKind : uint8_t {
#define LUMINAL_OP(name, ...) name,
#include "luminal/ops.def"
#undef LUMINAL_OP
};
enum class OpCategory : uint8_t { Source, Unary, Binary, Reduce, Index, Special };

std::string_view op_name(OpKind op);
int op_arity(OpKind op);  // -1: variadic
OpCategory op_category(OpKind op);
std::string_view op_summary(OpKind op);

using NodeId = uint32_t;
inline constexpr NodeId kNoNode = ~NodeId{0};

// An escape hatch for ops that are not compositions of primitives. The reference
// implementation receives contiguous inputs and returns a contiguous output.
class CustomOp {
 public:
  virtual ~CustomOp() = default;
  virtual std::string name() const = 0;
  virtual HostTensor execute_reference(std::span<const HostTensor> inputs, const std::vector<int64_t>& out_shape,
                                       DType out_dtype) const = 0;
};

struct NodeInput {
  NodeId node = kNoNode;
  ShapeTracker view;  // how this consumer reads the producer's buffer
};

struct Node {
  OpKind op = OpKind::Input;
  DType dtype = DType::F32;
  Shape shape;                    // output shape; the buffer is row-major contiguous
  std::vector<NodeInput> inputs;
  // Payload: which fields matter depends on `op`.
  std::string label;              // Input: tensor name; Output: optional name
  double constant = 0;            // Constant
  Expression iota_expr;           // Iota: value of flat element z
  int axis = -1;                  // SumReduce/MaxReduce: axis of inputs[0].view
  bool persist = false;           // Input: buffer survives execute
  NodeId updates = kNoNode;       // Output: after execute, this Input's buffer becomes the output
  std::shared_ptr<const CustomOp> custom;
  std::string user_op;  // the tensor-API op this node was decomposed from ("softmax"), for errors
};

class GraphTensor;
class Runtime;
struct CompileOptions;

class Graph {
 public:
  Graph();
  Graph(const Graph&) = default;
  Graph& operator=(const Graph&) = default;

  // ---- building ----
  GraphTensor tensor(const Shape& shape, DType dtype = DType::F32);
  GraphTensor named_tensor(std::string name, const Shape& shape, DType dtype = DType::F32);
  GraphTensor constant(double value, DType dtype = DType::F32);
  // A tensor of `shape` whose element at flat index z is `value(z)` (integer dtype).
  GraphTensor iota(const Expression& value, const Shape& shape, DType dtype = DType::I32);
  GraphTensor arange(const Expression& n, DType dtype = DType::I32);
  GraphTensor arange(double start, double end, double step, DType dtype = DType::F32);
  // State that carries across executions (KV caches): after each execute, the
  // persisted input `state` holds `value`. Returns the Output tensor of `value`.
  GraphTensor update(const GraphTensor& state, const GraphTensor& value);
  GraphTensor custom_op(std::shared_ptr<const CustomOp> op, const std::vector<GraphTensor>& inputs,
                        const Shape& out_shape, DType dtype);

  // Low-level: append a node (validated). The tensor API is built on this.
  NodeId add_node(Node node);

  // ---- dynamic dims ----
  void set_dim(std::string_view name, int64_t value);
  const DimMap& dim_map() const { return dims_; }

  // ---- inspection ----
  size_t size() const { return nodes_.size(); }
  const Node& node(NodeId id) const;
  Node& mutable_node(NodeId id);
  const std::vector<Node>& nodes() const { return nodes_; }
  std::vector<NodeId> inputs() const;   // Input nodes in creation order
  std::vector<NodeId> outputs() const;  // Output nodes in creation order
  NodeId find_input(std::string_view label) const;  // kNoNode when absent
  std::string to_dot() const;           // Graphviz
  // Identifies the graph a runtime was compiled from (copies share it), so tensors of
  // another graph are rejected instead of silently aliasing node ids.
  uint64_t uid() const { return uid_; }

  // ---- compiling ----
  // Lower, search and load this graph into `runtime`; returns it ready to execute.
  template <class R>
  R compile(R runtime, const CompileOptions& options) const {
    compile_into(runtime, options);
    return runtime;
  }
  void compile_into(Runtime& runtime, const CompileOptions& options) const;

 private:
  std::vector<Node> nodes_;
  DimMap dims_;
  uint64_t uid_;
};

}  // namespace luminal
