#include "luminal/graph.hpp"

#include <atomic>
#include <cmath>
#include <sstream>

#include "luminal/compile.hpp"
#include "luminal/error.hpp"
#include "luminal/runtime.hpp"
#include "luminal/tensor.hpp"

namespace luminal {
namespace {

struct OpInfo {
  std::string_view name;
  int arity;
  OpCategory category;
  std::string_view summary;
};
constexpr OpInfo kOps[] = {
#define LUMINAL_OP(name, arity, category, summary) {#name, arity, OpCategory::category, summary},
#include "luminal/ops.def"
#undef LUMINAL_OP
};
const OpInfo& info(OpKind op) { return kOps[static_cast<size_t>(op)]; }

bool same_shape(const Shape& a, const Shape& b) { return a == b; }

void validate(const Graph& g, const Node& n) {
  const auto& in = n.inputs;
  auto name = op_name(n.op);
  if (op_arity(n.op) >= 0)
    LUMINAL_CHECK(static_cast<int>(in.size()) == op_arity(n.op), name, " takes ", op_arity(n.op),
                  " inputs, got ", in.size());
  for (const auto& i : in) LUMINAL_CHECK(i.node < g.size(), name, ": input node ", i.node, " does not exist");
  auto in_dtype = [&](size_t k) { return g.node(in[k].node).dtype; };
  switch (op_category(n.op)) {
    case OpCategory::Source: LUMINAL_CHECK(in.empty(), name, " takes no inputs"); break;
    case OpCategory::Unary:
      LUMINAL_CHECK(same_shape(in[0].view.shape(), n.shape), name, ": view shape ", to_string(in[0].view.shape()),
                    " differs from output shape ", to_string(n.shape));
      if (n.op != OpKind::Cast) {
        LUMINAL_CHECK(is_float(in_dtype(0)), name, " needs a float input, got ", dtype_name(in_dtype(0)));
        LUMINAL_CHECK(n.dtype == in_dtype(0), name, ": output dtype must equal input dtype");
      }
      break;
    case OpCategory::Binary:
      LUMINAL_CHECK(in_dtype(0) == in_dtype(1), name, ": input dtypes differ (", dtype_name(in_dtype(0)), " vs ",
                    dtype_name(in_dtype(1)), "); cast first");
      LUMINAL_CHECK(same_shape(in[0].view.shape(), n.shape) && same_shape(in[1].view.shape(), n.shape), name,
                    ": input views ", to_string(in[0].view.shape()), " and ", to_string(in[1].view.shape()),
                    " must both have the output shape ", to_string(n.shape));
      LUMINAL_CHECK(n.dtype == (n.op == OpKind::LessThan ? DType::Bool : in_dtype(0)), name, ": wrong output dtype");
      break;
    case OpCategory::Reduce: {
      LUMINAL_CHECK(n.axis >= 0 && n.axis < static_cast<int>(in[0].view.rank()), name, ": axis ", n.axis,
                    " out of range for rank ", in[0].view.rank());
      Shape expect = in[0].view.shape();
      expect.erase(expect.begin() + n.axis);
      LUMINAL_CHECK(same_shape(expect, n.shape), name, ": output shape ", to_string(n.shape), " should be ",
                    to_string(expect));
      LUMINAL_CHECK(n.dtype == in_dtype(0), name, ": output dtype must equal input dtype");
      break;
    }
    case OpCategory::Index:
      if (n.op == OpKind::Gather) {
        LUMINAL_CHECK(!is_float(in_dtype(0)), "Gather: indexes must be an integer tensor, got ",
                      dtype_name(in_dtype(0)));
        LUMINAL_CHECK(same_shape(in[0].view.shape(), n.shape), "Gather: output shape must equal the index shape");
        LUMINAL_CHECK(n.dtype == in_dtype(1), "Gather: output dtype must equal data dtype");
      } else {
        LUMINAL_CHECK(!is_float(in_dtype(1)), "Scatter: indexes must be an integer tensor, got ",
                      dtype_name(in_dtype(1)));
        LUMINAL_CHECK(same_shape(in[0].view.shape(), n.shape), "Scatter: output shape must equal the dest shape");
        LUMINAL_CHECK(same_shape(in[1].view.shape(), in[2].view.shape()),
                      "Scatter: index and source shapes differ: ", to_string(in[1].view.shape()), " vs ",
                      to_string(in[2].view.shape()));
        LUMINAL_CHECK(in_dtype(0) == in_dtype(2) && n.dtype == in_dtype(0), "Scatter: dest and src dtypes differ");
      }
      break;
    case OpCategory::Special:
      if (n.op == OpKind::Output) {
        LUMINAL_CHECK(same_shape(in[0].view.shape(), n.shape) && n.dtype == in_dtype(0),
                      "Output: shape and dtype must match its input");
        if (n.updates != kNoNode) {
          const Node& target = g.node(n.updates);
          LUMINAL_CHECK(target.op == OpKind::Input, "assign: target must be an input tensor");
          LUMINAL_CHECK(same_shape(target.shape, n.shape) && target.dtype == n.dtype,
                        "assign: new value ", to_string(n.shape), " ", dtype_name(n.dtype),
                        " does not match state '", target.label, "' ", to_string(target.shape), " ",
                        dtype_name(target.dtype));
        }
      } else if (n.op == OpKind::BackendOp) {
        LUMINAL_CHECK(n.backend != nullptr, "BackendOp node without its call");
      } else {
        LUMINAL_CHECK(n.custom != nullptr, "CustomOp node without an implementation");
      }
      break;
  }
}

}  // namespace

std::string_view op_name(OpKind op) { return info(op).name; }
int op_arity(OpKind op) { return info(op).arity; }
OpCategory op_category(OpKind op) { return info(op).category; }
std::string_view op_summary(OpKind op) { return info(op).summary; }

Graph::Graph() {
  static std::atomic<uint64_t> next{1};
  uid_ = next++;
}

NodeId Graph::add_node(Node node) {
  validate(*this, node);
  nodes_.push_back(std::move(node));
  return static_cast<NodeId>(nodes_.size() - 1);
}

const Node& Graph::node(NodeId id) const {
  LUMINAL_ASSERT(id < nodes_.size(), "node ", id, " of ", nodes_.size());
  return nodes_[id];
}
Node& Graph::mutable_node(NodeId id) {
  LUMINAL_ASSERT(id < nodes_.size(), "node ", id, " of ", nodes_.size());
  return nodes_[id];
}

GraphTensor Graph::tensor(const Shape& shape, DType dtype) {
  return named_tensor("input" + std::to_string(nodes_.size()), shape, dtype);
}

GraphTensor Graph::named_tensor(std::string name, const Shape& shape, DType dtype) {
  Node n;
  n.op = OpKind::Input;
  n.dtype = dtype;
  n.shape = shape;
  n.label = std::move(name);
  NodeId id = add_node(std::move(n));
  return GraphTensor(this, id, ShapeTracker::contiguous(shape), dtype);
}

GraphTensor Graph::constant(double value, DType dtype) {
  Node n;
  n.op = OpKind::Constant;
  n.dtype = dtype;
  n.constant = value;
  NodeId id = add_node(std::move(n));
  return GraphTensor(this, id, ShapeTracker::contiguous({}), dtype);
}

GraphTensor Graph::iota(const Expression& value, const Shape& shape, DType dtype) {
  LUMINAL_CHECK(!is_float(dtype), "iota: dtype must be an integer type, got ", dtype_name(dtype));
  Node n;
  n.op = OpKind::Iota;
  n.dtype = dtype;
  n.shape = shape;
  n.iota_expr = value;
  NodeId id = add_node(std::move(n));
  return GraphTensor(this, id, ShapeTracker::contiguous(shape), dtype);
}

GraphTensor Graph::arange(const Expression& n, DType dtype) {
  if (is_float(dtype)) return iota(Expression::index(), {n}, DType::I32).cast(dtype);
  return iota(Expression::index(), {n}, dtype);
}

GraphTensor Graph::arange(double start, double end, double step, DType dtype) {
  LUMINAL_CHECK(step != 0, "arange: step must be nonzero");
  auto n = static_cast<int64_t>(std::ceil((end - start) / step));
  if (n < 0) n = 0;
  GraphTensor idx = iota(Expression::index(), {n}, DType::I32).cast(DType::F64);
  return (idx * step + start).cast(dtype);
}

GraphTensor Graph::custom_op(std::shared_ptr<const CustomOp> op, const std::vector<GraphTensor>& inputs,
                             const Shape& out_shape, DType dtype) {
  LUMINAL_CHECK(op != nullptr, "custom_op: null op");
  Node n;
  n.op = OpKind::CustomOp;
  n.dtype = dtype;
  n.shape = out_shape;
  n.label = op->name();
  n.custom = std::move(op);
  for (const auto& t : inputs) n.inputs.push_back({t.id(), t.view()});
  NodeId id = add_node(std::move(n));
  return GraphTensor(this, id, ShapeTracker::contiguous(out_shape), dtype);
}

GraphTensor Graph::update(const GraphTensor& state, const GraphTensor& value) {
  LUMINAL_CHECK(&state.graph() == this && &value.graph() == this, "update: tensors belong to another graph");
  LUMINAL_CHECK(node(state.id()).op == OpKind::Input, "update: the state must be an input tensor");
  state.persist();
  Node n;
  n.op = OpKind::Output;
  n.dtype = node(state.id()).dtype;
  n.shape = node(state.id()).shape;
  n.label = node(state.id()).label + ".next";
  n.updates = state.id();
  GraphTensor v = value.cast(n.dtype);
  LUMINAL_CHECK(v.shape() == n.shape, "update: new value of '", node(state.id()).label, "' has shape ",
                to_string(v.shape()), ", the state has ", to_string(n.shape));
  n.inputs = {{v.id(), v.view()}};
  NodeId id = add_node(std::move(n));
  return GraphTensor(this, id, ShapeTracker::contiguous(nodes_[id].shape), nodes_[id].dtype);
}

void Graph::set_dim(std::string_view name, int64_t value) {
  LUMINAL_CHECK(name != Expression::kIndexName, "set_dim: '", name, "' is reserved for the index variable");
  LUMINAL_CHECK(value >= 0, "set_dim: dimension '", name, "' must be non-negative, got ", value);
  dims_[std::string(name)] = value;
}

std::vector<NodeId> Graph::inputs() const {
  std::vector<NodeId> out;
  for (NodeId i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].op == OpKind::Input) out.push_back(i);
  return out;
}

std::vector<NodeId> Graph::outputs() const {
  std::vector<NodeId> out;
  for (NodeId i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].op == OpKind::Output) out.push_back(i);
  return out;
}

NodeId Graph::find_input(std::string_view label) const {
  for (NodeId i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].op == OpKind::Input && nodes_[i].label == label) return i;
  return kNoNode;
}

std::string Graph::to_dot() const {
  std::ostringstream os;
  os << "digraph luminal {\n  node [shape=box, fontname=\"monospace\"];\n";
  for (NodeId i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    os << "  n" << i << " [label=\"" << op_name(n.op);
    if (n.op == OpKind::Input || n.op == OpKind::CustomOp) os << " '" << n.label << "'";
    if (n.op == OpKind::Constant) os << " " << n.constant;
    if (n.op == OpKind::Iota) os << " " << n.iota_expr.to_string();
    if (n.axis >= 0) os << " axis=" << n.axis;
    os << "\\n" << dtype_name(n.dtype) << " " << to_string(n.shape) << "\"];\n";
    for (const auto& in : n.inputs) os << "  n" << in.node << " -> n" << i << ";\n";
  }
  os << "}\n";
  return os.str();
}

}  // namespace luminal
