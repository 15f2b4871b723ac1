#include "luminal/search/hlir_egraph.hpp"

#include <algorithm>
#include <unordered_map>

#include "luminal/error.hpp"

namespace luminal::search {
using egraph::ClassId;
using egraph::EGraph;
using egraph::Value;
using egraph::ValueKind;

namespace {

enum class Payload { None, Id, F64, Expr, Axis };

Payload payload_of(OpKind op) {
  switch (op) {
    case OpKind::Input:
    case OpKind::Output:
    case OpKind::CustomOp: return Payload::Id;
    case OpKind::Constant: return Payload::F64;
    case OpKind::Iota: return Payload::Expr;
    case OpKind::SumReduce:
    case OpKind::MaxReduce: return Payload::Axis;
    default: return Payload::None;
  }
}

constexpr OpKind kAllOps[] = {
#define LUMINAL_OP(name, ...) OpKind::name,
#include "luminal/ops.def"
#undef LUMINAL_OP
};

}  // namespace

struct Signature {
  egraph::SortId ir, ilist, string, exprlist, i64, f64, expr;
  std::vector<egraph::OpId> op_of;          // OpKind -> constructor
  std::unordered_map<egraph::OpId, OpKind> kind_of;
  egraph::OpId icons, inil;
  egraph::FuncId dtype_of, shape_of;  // functions over e-classes, for rule guards
};

namespace {

// The IR datatype, generated from the op table.
Signature declare_signature(EGraph& g) {
  Signature s;
  s.ir = g.declare_sort("IR");
  s.ilist = g.declare_sort("IList");
  s.string = *g.find_sort("String");
  s.exprlist = *g.find_sort("ExprList");
  s.i64 = *g.find_sort("i64");
  s.f64 = *g.find_sort("f64");
  s.expr = *g.find_sort("Expr");
  s.icons = g.declare_constructor("ICons", {s.ir, s.exprlist, s.ilist}, s.ilist, 0);
  s.inil = g.declare_constructor("INil", {}, s.ilist, 0);
  s.dtype_of = g.declare_function("dtype-of", {s.ir}, s.string, egraph::MergeKind::Old);
  s.shape_of = g.declare_function("shape-of", {s.ir}, s.exprlist, egraph::MergeKind::Old);
  for (OpKind op : kAllOps) {
    std::vector<egraph::SortId> args = {s.string, s.exprlist};
    switch (payload_of(op)) {
      case Payload::Id:
      case Payload::Axis: args.push_back(s.i64); break;
      case Payload::F64: args.push_back(s.f64); break;
      case Payload::Expr: args.push_back(s.expr); break;
      case Payload::None: break;
    }
    if (op == OpKind::CustomOp) {
      args.push_back(s.ilist);
    } else {
      for (int i = 0; i < op_arity(op); ++i) {
        args.push_back(s.ir);
        args.push_back(s.exprlist);
      }
    }
    egraph::OpId id = g.declare_constructor(op_name(op), args, s.ir);
    s.op_of.push_back(id);
    s.kind_of[id] = op;
  }
  return s;
}


// Host primitives for rule guards over views.
void register_view_primitives(EGraph& g) {
  // (view-identity ?view ?shape): the view reads a contiguous buffer of exactly ?shape.
  g.register_primitive("view-identity", [](std::span<const Value> a) -> std::optional<Value> {
    if (a.size() != 2 || a[0].kind() != ValueKind::ExprList || a[1].kind() != ValueKind::ExprList) return std::nullopt;
    ShapeTracker v = decode_view(a[0]);
    auto shape = a[1].as_expr_list();
    bool same = v.is_contiguous() && v.rank() == shape.size() &&
                std::equal(shape.begin(), shape.end(), v.shape().begin());
    return Value::boolean(same);
  });
  // (empty-shape): the shape of a scalar, for building Constants in actions.
  g.register_primitive("empty-shape", [](std::span<const Value> a) -> std::optional<Value> {
    if (!a.empty()) return std::nullopt;
    return Value::expr_list({});
  });
  // (broadcast-view ?shape): a scalar read at every element of ?shape.
  g.register_primitive("broadcast-view", [](std::span<const Value> a) -> std::optional<Value> {
    if (a.size() != 1 || a[0].kind() != ValueKind::ExprList) return std::nullopt;
    ShapeTracker v = ShapeTracker::contiguous({});
    auto shape = a[0].as_expr_list();
    for (size_t d = 0; d < shape.size(); ++d) v = v.insert_broadcast(static_cast<int>(d), shape[d]);
    return encode_view(v);
  });
  // (cast-roundtrips ?a ?b): casting ?a -> ?b -> ?a is lossless.
  g.register_primitive("cast-roundtrips", [](std::span<const Value> a) -> std::optional<Value> {
    if (a.size() != 2 || a[0].kind() != ValueKind::String || a[1].kind() != ValueKind::String) return std::nullopt;
    DType from = parse_dtype(a[0].as_string()), via = parse_dtype(a[1].as_string());
    bool ok = from == via || (is_float(from) && is_float(via) && dtype_bytes(via) > dtype_bytes(from) &&
                              !(from == DType::BF16 && via == DType::F16));
    ok = ok || (!is_float(from) && !is_float(via) && dtype_bytes(via) > dtype_bytes(from) &&
                (is_signed(via) || !is_signed(from)) && from != DType::Bool);
    return Value::boolean(ok);
  });
}

}  // namespace

Value encode_view(const ShapeTracker& view) {
  std::vector<Expression> flat;
  flat.reserve(view.rank() * 3 + 2);
  for (const auto& d : view.dims()) {
    flat.push_back(d.size);
    flat.push_back(d.offset);
    flat.push_back(d.valid);
  }
  flat.push_back(view.base_offset());
  flat.push_back(view.base_valid());
  return Value::expr_list(flat);
}

ShapeTracker decode_view(const Value& v) {
  auto flat = v.as_expr_list();
  LUMINAL_ASSERT(flat.size() >= 2 && (flat.size() - 2) % 3 == 0, "malformed view payload");
  size_t rank = (flat.size() - 2) / 3;
  std::vector<ViewDim> dims;
  for (size_t d = 0; d < rank; ++d) dims.push_back({flat[3 * d], flat[3 * d + 1], flat[3 * d + 2]});
  return ShapeTracker::from_parts(std::move(dims), flat[3 * rank], flat[3 * rank + 1]);
}

std::vector<std::string> core_rule_files() { return {std::string(LUMINAL_SOURCE_DIR) + "/src/core/core.egg"}; }

LoweredGraph lower_to_egraph(const Graph& g) {
  LoweredGraph out;
  out.source = &g;
  out.egraph = std::make_unique<EGraph>();
  EGraph& eg = *out.egraph;
  auto sig_ptr = std::make_shared<Signature>(declare_signature(eg));
  out.signature = sig_ptr;
  const Signature& sig = *sig_ptr;
  register_view_primitives(eg);
  // Analyses: each class has one dtype and one shape; a union of different ones is a bug.
  auto same = [](const char* what) {
    return [what](const Value& a, const Value& b) {
      LUMINAL_ASSERT(a.is_none() || b.is_none() || a == b, "e-class ", what, " conflict: ", a.to_string(), " vs ",
                     b.to_string());
      return a.is_none() ? b : a;
    };
  };
  egraph::SortId ir = sig.ir;
  eg.register_analysis({"dtype", [ir](const EGraph& e, egraph::NodeId n) {
                          return e.op(e.node(n).op).sort == ir ? e.node_arg(n, 0) : Value();
                        }, same("dtype")});
  eg.register_analysis({"shape", [ir](const EGraph& e, egraph::NodeId n) {
                          return e.op(e.node(n).op).sort == ir ? e.node_arg(n, 1) : Value();
                        }, same("shape")});

  out.class_of.resize(g.size());
  std::vector<Value> args;
  for (NodeId i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    args.clear();
    args.push_back(Value::string(dtype_name(n.dtype)));
    args.push_back(Value::expr_list(n.shape));
    switch (payload_of(n.op)) {
      case Payload::Id: args.push_back(Value::i64(i)); break;
      case Payload::Axis: args.push_back(Value::i64(n.axis)); break;
      case Payload::F64: args.push_back(Value::f64(n.constant)); break;
      case Payload::Expr: args.push_back(Value::expr(n.iota_expr)); break;
      case Payload::None: break;
    }
    if (n.op == OpKind::CustomOp) {
      ClassId list = eg.add(sig.inil, {});
      for (size_t k = n.inputs.size(); k-- > 0;) {
        Value cons[] = {Value::cls(out.class_of[n.inputs[k].node]), encode_view(n.inputs[k].view), Value::cls(list)};
        list = eg.add(sig.icons, cons);
      }
      args.push_back(Value::cls(list));
    } else {
      for (const auto& in : n.inputs) {
        args.push_back(Value::cls(out.class_of[in.node]));
        args.push_back(encode_view(in.view));
      }
    }
    out.class_of[i] = eg.add(sig.op_of[static_cast<size_t>(n.op)], args);
    Value cls[] = {Value::cls(out.class_of[i])};
    eg.set_function(sig.dtype_of, cls, args[0]);
    eg.set_function(sig.shape_of, cls, args[1]);
    if (n.op == OpKind::Output) out.roots.push_back(out.class_of[i]);
  }
  eg.rebuild();
  return out;
}

ChoiceSpace choice_space(const LoweredGraph& lowered) {
  const EGraph& eg = *lowered.egraph;
  ChoiceSpace space;
  std::vector<ClassId> stack;
  std::vector<char> seen;
  auto visit = [&](ClassId c) {
    c = eg.find(c);
    if (c >= seen.size()) seen.resize(c + 1, 0);
    if (!seen[c]) {
      seen[c] = 1;
      stack.push_back(c);
    }
  };
  for (ClassId r : lowered.roots) visit(r);
  std::vector<ClassId> reachable;
  while (!stack.empty()) {
    ClassId c = stack.back();
    stack.pop_back();
    reachable.push_back(c);
    for (egraph::NodeId n : eg.class_nodes(c))
      for (ClassId ch : eg.children(n)) visit(ch);
  }
  std::sort(reachable.begin(), reachable.end());
  space.reachable_classes = reachable.size();
  space.slot_of.assign(seen.size(), -1);
  for (ClassId c : reachable) {
    auto nodes = eg.class_nodes(c);
    std::sort(nodes.begin(), nodes.end());
    if (nodes.size() < 2) continue;
    space.slot_of[c] = static_cast<int>(space.slots.size());
    space.slots.push_back(c);
    space.options.push_back(std::move(nodes));
  }
  return space;
}

std::optional<Extracted> extract(const LoweredGraph& lowered, const ChoiceSpace& space,
                                 const std::vector<uint32_t>& genome) {
  const EGraph& eg = *lowered.egraph;
  const Signature& sig = *lowered.signature;
  Extracted out;
  std::unordered_map<ClassId, NodeId> done;      // class -> program node
  std::unordered_map<ClassId, char> on_path;

  // Options of a class in preference order: the genome's pick first, then the rest
  // (used only to repair a cyclic pick).
  auto options = [&](ClassId c) {
    int slot = c < space.slot_of.size() ? space.slot_of[c] : -1;
    if (slot < 0) {
      auto nodes = eg.class_nodes(c);
      std::sort(nodes.begin(), nodes.end());
      return nodes;
    }
    std::vector<egraph::NodeId> order = space.options[slot];
    std::rotate(order.begin(), order.begin() + genome[slot], order.end());
    return order;
  };

  // Iterative would be safer for very deep graphs; segments keep depth moderate.
  std::function<std::optional<NodeId>(ClassId)> build = [&](ClassId c) -> std::optional<NodeId> {
    c = eg.find(c);
    if (auto it = done.find(c); it != done.end()) return it->second;
    if (on_path[c]) return std::nullopt;  // cycle
    on_path[c] = 1;
    std::optional<NodeId> result;
    for (egraph::NodeId en : options(c)) {
      auto kind = sig.kind_of.find(eg.node(en).op);
      if (kind == sig.kind_of.end()) continue;  // not an IR op (cannot happen for IR classes)
      OpKind op = kind->second;
      const Node* proto = nullptr;
      Node n;
      n.op = op;
      n.dtype = parse_dtype(eg.node_arg(en, 0).as_string());
      auto shape = eg.node_arg(en, 1).as_expr_list();
      n.shape.assign(shape.begin(), shape.end());
      size_t arg = 2;
      NodeId source_id = kNoNode;
      switch (payload_of(op)) {
        case Payload::Id:
          source_id = static_cast<NodeId>(eg.node_arg(en, arg++).as_i64());
          proto = &lowered.source->node(source_id);
          break;
        case Payload::Axis: n.axis = static_cast<int>(eg.node_arg(en, arg++).as_i64()); break;
        case Payload::F64: n.constant = eg.node_arg(en, arg++).as_f64(); break;
        case Payload::Expr: n.iota_expr = eg.node_arg(en, arg++).as_expr(); break;
        case Payload::None: break;
      }
      bool ok = true;
      std::vector<std::pair<ClassId, Value>> inputs;
      if (op == OpKind::CustomOp) {
        ClassId list = eg.find(eg.node_arg(en, arg).as_class());
        while (ok) {
          auto nodes = eg.class_nodes(list);
          if (nodes.empty()) { ok = false; break; }
          egraph::NodeId cell = *std::min_element(nodes.begin(), nodes.end());
          if (eg.node(cell).op == sig.inil) break;
          inputs.emplace_back(eg.node_arg(cell, 0).as_class(), eg.node_arg(cell, 1));
          list = eg.find(eg.node_arg(cell, 2).as_class());
        }
      } else {
        for (int k = 0; k < op_arity(op); ++k, arg += 2)
          inputs.emplace_back(eg.node_arg(en, arg).as_class(), eg.node_arg(en, arg + 1));
      }
      for (auto& [child, view] : inputs) {
        if (!ok) break;
        auto id = build(child);
        if (!id) { ok = false; break; }
        n.inputs.push_back({*id, decode_view(view)});
      }
      if (!ok) continue;
      if (proto) {  // carry what the e-graph does not: labels, persistence, custom impls
        n.label = proto->label;
        n.persist = proto->persist;
        n.custom = proto->custom;
      }
      NodeId id = out.program.add_node(std::move(n));
      out.io_of.push_back(op == OpKind::Input || op == OpKind::Output ? source_id : kNoNode);
      result = id;
      break;
    }
    on_path[c] = 0;
    if (result) done[c] = *result;
    return result;
  };
  for (ClassId r : lowered.roots)
    if (!build(r)) return std::nullopt;
  // Inputs unreachable from the outputs still exist for the user (set_data on them works).
  for (NodeId i = 0; i < lowered.source->size(); ++i) {
    const Node& n = lowered.source->node(i);
    if (n.op != OpKind::Input || done.count(eg.find(lowered.class_of[i]))) continue;
    out.program.add_node(n);
    out.io_of.push_back(i);
  }
  return out;
}

}  // namespace luminal::search
