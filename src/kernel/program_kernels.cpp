#include "luminal/kernel/program_kernels.hpp"

#include <algorithm>
#include <vector>

#include "luminal/error.hpp"
#include "luminal/kernel/fusion.hpp"
#include "luminal/kernel/kernel.hpp"
#include "luminal/search/hlir_egraph.hpp"

namespace luminal::kernel {

bool adjoin_siblings(RunnableProgram& r, const std::function<bool(const Node& first, const Node& later)>& siblings) {
  const Graph& g = r.graph;
  const size_t n = g.size();
  std::vector<NodeId> order;
  order.reserve(n);
  std::vector<char> placed(n, 0);
  auto place = [&](NodeId i) {
    placed[i] = 1;
    order.push_back(i);
  };
  bool moved = false;
  for (NodeId i = 0; i < n; ++i) {
    if (placed[i]) continue;
    place(i);
    const Node& a = g.node(i);
    for (NodeId j = i + 1; j < n; ++j) {
      const Node& b = g.node(j);
      if (placed[j] || !siblings(a, b)) continue;
      bool ready = true;
      for (const auto& in : b.inputs) ready = ready && (placed[in.node] || g.node(in.node).op == OpKind::Input);
      if (!ready) continue;
      for (const auto& in : b.inputs)
        if (!placed[in.node]) place(in.node);
      place(j);
      moved = true;
    }
  }
  if (!moved) return false;
  std::vector<NodeId> new_id(n, kNoNode);
  for (size_t k = 0; k < n; ++k) new_id[order[k]] = static_cast<NodeId>(k);
  Graph out;
  std::vector<NodeId> external_ids(n, kNoNode);
  for (NodeId old : order) {
    Node copy = g.node(old);
    for (auto& in : copy.inputs) in.node = new_id[in.node];
    if (copy.updates != kNoNode) copy.updates = new_id[copy.updates];
    const NodeId id = out.add_node(std::move(copy));
    LUMINAL_ASSERT(id == new_id[old], "adjoin_siblings renumbered node ", old);
    external_ids[id] = r.external_ids[old];
  }
  for (auto& [external, node] : r.program_of) node = new_id[node];
  r.graph = std::move(out);
  r.external_ids = std::move(external_ids);
  return true;
}

RunnableProgram runnable_program(const Graph& program, const std::vector<NodeId>& external_ids,
                                 const FuseOptions& fusion) {
  LUMINAL_ASSERT(external_ids.size() == program.size(), "external id table size");
  RunnableProgram r;
  std::vector<NodeId> renumbered;
  r.graph = fuse_program(program, renumbered, fusion);
  r.external_ids.assign(r.graph.size(), kNoNode);
  for (NodeId i = 0; i < program.size(); ++i)
    if (renumbered[i] != kNoNode) r.external_ids[renumbered[i]] = external_ids[i];
  for (NodeId i = 0; i < r.graph.size(); ++i) {
    const Node& n = r.graph.node(i);
    for (const auto& in : n.inputs) LUMINAL_ASSERT(in.node < i, "program is not in topological order at node ", i);
    for (const auto& d : n.shape)
      for (const auto& v : d.variables()) r.dim_names.push_back(v);
    if ((n.op == OpKind::Input || n.op == OpKind::Output) && r.external_ids[i] != kNoNode)
      r.program_of[r.external_ids[i]] = i;
  }
  std::sort(r.dim_names.begin(), r.dim_names.end());
  r.dim_names.erase(std::unique(r.dim_names.begin(), r.dim_names.end()), r.dim_names.end());
  return r;
}

std::optional<InPlaceUpdate> in_place_update(const Graph& g, NodeId node, const Kernel& k) {
  if (k.phases.size() != 2 || k.phases[0].copies_input < 0) return std::nullopt;
  const Node& s = g.node(node);
  const NodeInput& dest = s.inputs.at(static_cast<size_t>(k.phases[0].copies_input));
  const Node& state = g.node(dest.node);
  if (state.op != OpKind::Input || !state.persist || state.dtype != s.dtype || !dest.view.is_contiguous() ||
      dest.view.shape() != state.shape || state.shape != s.shape)
    return std::nullopt;
  InPlaceUpdate u{node, dest.node, kNoNode};
  size_t readers = 0;
  for (NodeId i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    for (const auto& in : n.inputs) readers += in.node == dest.node;
    if (n.op == OpKind::Output && n.updates == dest.node) {
      if (n.inputs[0].node != node || !n.inputs[0].view.is_contiguous() || n.inputs[0].view.shape() != s.shape ||
          n.dtype != s.dtype)
        return std::nullopt;
      u.output = i;
    }
  }
  // Another reader would see the new rows (or race them): not in place.
  if (readers != 1 || u.output == kNoNode) return std::nullopt;
  return u;
}

std::optional<std::string> node_region_text(const Graph& g, const Node& n, std::string_view backend) {
  if (n.op == OpKind::BackendOp) {
    if (n.backend->name == "Fused") return n.backend->str(0);
    return std::nullopt;
  }
  if (n.op == OpKind::Input || n.op == OpKind::CustomOp) return std::nullopt;
  Node proto = n;
  proto.inputs.clear();
  if (n.op == OpKind::Output) {  // a copy that materialises the view
    proto.op = OpKind::Cast;
    proto.updates = kNoNode;
    proto.label.clear();
  }
  std::vector<FuseOperand> operands;
  for (const auto& in : n.inputs) {
    const Node& src = g.node(in.node);
    operands.push_back({nullptr, src.dtype, src.shape, in.view});
  }
  auto region = singleton(proto, operands);
  LUMINAL_CHECK(region.has_value(), backend, ": ", op_name(n.op), " node cannot be lowered to a kernel");
  return serialize(*region);
}

std::string copy_region_text(DType dtype, const Shape& shape, const ShapeTracker& view, std::string_view backend,
                             std::optional<DType> out_dtype) {
  Node proto;
  proto.op = OpKind::Cast;
  proto.dtype = out_dtype.value_or(dtype);
  proto.shape = view.shape();
  FuseOperand in{nullptr, dtype, shape, view};
  auto region = singleton(proto, std::span<const FuseOperand>(&in, 1));
  LUMINAL_CHECK(region.has_value(), backend, ": a copy of a ", dtype_name(dtype), " operand cannot be lowered");
  return serialize(*region);
}

namespace {

// `skip` is the operand's broadcast axis; `row_axis`/`col_axis` index its matrix dims.
std::optional<GemmOperand> gemm_operand(const ShapeTracker& v, int skip, int row_axis, int col_axis) {
  const int r = static_cast<int>(v.rank());
  const ViewDim& bc = v.dims()[skip];
  if (bc.offset.depends_on(Expression::kIndexName) || !(bc.valid == Expression(1))) return std::nullopt;
  GemmOperand o;
  std::vector<ViewDim> dims;
  for (int d = 0; d < r; ++d)
    if (d != skip) dims.push_back(v.dims()[d]);
  o.copy_view = ShapeTracker::from_parts(std::move(dims), v.base_offset(), v.base_valid());
  std::vector<Expression> strides;
  bool linear = v.base_valid() == Expression(1);
  for (int d = 0; d < r && linear; ++d) {
    auto st = search::view_axis_stride(v.dims()[d]);
    if (!st) linear = false;
    else strides.push_back(*st);
  }
  if (linear) {
    o.offset = v.base_offset();
    for (int d = 0; d < r; ++d) o.offset = o.offset + v.dims()[d].offset.substitute(Expression::kIndexName, 0);
    o.row = strides[row_axis];
    o.col = strides[col_axis];
    if (r >= 4) o.batch = strides[r - 4];
    o.outer.assign(strides.begin(), strides.begin() + std::max(0, r - 4));
    return o;
  }
  o.copy = true;  // not linear: copied (without its broadcast axis) into a contiguous buffer
  return o;
}

}  // namespace

std::optional<GemmLayout> gemm_layout(const ShapeTracker& va, const ShapeTracker& vb) {
  int r = static_cast<int>(va.rank());
  if (r < 3 || vb.rank() != va.rank()) return std::nullopt;
  GemmLayout g;
  g.rank = r;
  g.m = va.dims()[r - 3].size;
  g.n = va.dims()[r - 2].size;
  g.k = va.dims()[r - 1].size;
  if (r >= 4) g.batch = va.dims()[r - 4].size;
  for (int d = 0; d < r - 4; ++d) g.outer.push_back(va.dims()[d].size);
  auto a = gemm_operand(va, r - 2, r - 3, r - 1);  // A is broadcast along n
  auto b = gemm_operand(vb, r - 3, r - 1, r - 2);  // B along m
  if (!a || !b) return std::nullopt;
  // A copy is row-major [outer..., batch?, rows, cols]: its outer strides multiply up.
  auto copy_outer = [&](GemmOperand& o, const Expression& matrix) {
    o.outer.assign(g.outer.size(), 0);
    Expression stride = g.batch * matrix;
    for (size_t d = g.outer.size(); d-- > 0;) {
      o.outer[d] = stride;
      stride = stride * g.outer[d];
    }
  };
  if (a->copy) {  // the copy is [outer..., batch?, m, k] row-major
    a->row = g.k;
    a->col = 1;
    a->batch = g.m * g.k;
    copy_outer(*a, g.m * g.k);
  }
  if (b->copy) {  // the copy is [outer..., batch?, n, k] row-major: k has stride 1, n stride k
    b->row = 1;
    b->col = g.k;
    b->batch = g.n * g.k;
    copy_outer(*b, g.n * g.k);
  }
  g.a = std::move(*a);
  g.b = std::move(*b);
  return g;
}

}  // namespace luminal::kernel
