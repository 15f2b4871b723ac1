#include "luminal/search/hlir_egraph.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "luminal/egraph/extract.hpp"

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
    case OpKind::MaxReduce:
    case OpKind::Gather:   // the user's axis (or -1): index bounds are checked along it
    case OpKind::Scatter: return Payload::Axis;
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
  egraph::OpId icons, inil, iappend;
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
  // List concatenation for rules that merge input lists (the fusion rules reduce it to
  // ICons/INil); never extracted itself.
  s.iappend = g.declare_constructor("IAppend", {s.ilist, s.ilist}, s.ilist, 0, /*unextractable=*/true);
  s.dtype_of = g.declare_function("dtype-of", {s.ir}, s.string, egraph::MergeKind::Old);
  s.shape_of = g.declare_function("shape-of", {s.ir}, s.exprlist, egraph::MergeKind::Old);
  for (OpKind op : kAllOps) {
    if (op == OpKind::BackendOp) {  // declared by the backends' rule files
      s.op_of.push_back(egraph::kInvalid);
      continue;
    }
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
  // (half-float ?dtype): F16 or BF16, the dtypes a backend may keep weights in under an
  // F32 product (widened while reading; every half value is exact in F32).
  g.register_primitive("half-float", [](std::span<const Value> a) -> std::optional<Value> {
    if (a.size() != 1 || a[0].kind() != ValueKind::String) return std::nullopt;
    return Value::boolean(a[0].as_string() == dtype_name(DType::F16) || a[0].as_string() == dtype_name(DType::BF16));
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
  // ---- views and lists, so rules can pin layouts exactly (a matmul rule must never match
  // a graph whose operands are laid out otherwise) ----
  auto view_arg = [](std::span<const Value> a, size_t n) -> std::optional<ShapeTracker> {
    if (a.size() != n || a[0].kind() != ValueKind::ExprList) return std::nullopt;
    auto flat = a[0].as_expr_list();
    if (flat.size() < 2 || (flat.size() - 2) % 3 != 0) return std::nullopt;
    return decode_view(a[0]);
  };
  auto axis_arg = [](std::span<const Value> a, const ShapeTracker& v) -> std::optional<size_t> {
    if (a[1].kind() != ValueKind::I64 || a[1].as_i64() < 0 || static_cast<size_t>(a[1].as_i64()) >= v.rank())
      return std::nullopt;
    return static_cast<size_t>(a[1].as_i64());
  };
  // (view-rank ?v): number of logical dims.
  g.register_primitive("view-rank", [=](std::span<const Value> a) -> std::optional<Value> {
    auto v = view_arg(a, 1);
    if (!v) return std::nullopt;
    return Value::i64(static_cast<int64_t>(v->rank()));
  });
  // (view-size ?v axis): the size of one axis.
  g.register_primitive("view-size", [=](std::span<const Value> a) -> std::optional<Value> {
    auto v = view_arg(a, 2);
    if (!v) return std::nullopt;
    auto ax = axis_arg(a, *v);
    if (!ax) return std::nullopt;
    return Value::expr(v->dims()[*ax].size);
  });
  // (view-stride ?v axis): the element stride of an axis whose offset is linear in its
  // index and which has no padding; no value otherwise (so a guard on it fails).
  g.register_primitive("view-stride", [=](std::span<const Value> a) -> std::optional<Value> {
    auto v = view_arg(a, 2);
    if (!v) return std::nullopt;
    auto ax = axis_arg(a, *v);
    if (!ax) return std::nullopt;
    auto stride = view_axis_stride(v->dims()[*ax]);
    if (!stride) return std::nullopt;
    return Value::expr(*stride);
  });
  // (view-broadcast ?v axis): the axis reads the same element at every index.
  g.register_primitive("view-broadcast", [=](std::span<const Value> a) -> std::optional<Value> {
    auto v = view_arg(a, 2);
    if (!v) return std::nullopt;
    auto ax = axis_arg(a, *v);
    if (!ax) return std::nullopt;
    const ViewDim& d = v->dims()[*ax];
    return Value::boolean(!d.offset.depends_on(Expression::kIndexName) && d.valid == Expression(1));
  });
  // (view-contiguous ?v): reads a row-major buffer of the view's own shape, in order.
  g.register_primitive("view-contiguous", [=](std::span<const Value> a) -> std::optional<Value> {
    auto v = view_arg(a, 1);
    if (!v) return std::nullopt;
    return Value::boolean(v->is_contiguous());
  });
  // (view-padded ?v): some element of the view lies in padding (reads 0).
  g.register_primitive("view-padded", [=](std::span<const Value> a) -> std::optional<Value> {
    auto v = view_arg(a, 1);
    if (!v) return std::nullopt;
    return Value::boolean(v->has_padding());
  });
  // (view-shape ?v): the logical shape of a view.
  g.register_primitive("view-shape", [=](std::span<const Value> a) -> std::optional<Value> {
    auto v = view_arg(a, 1);
    if (!v) return std::nullopt;
    return Value::expr_list(v->shape());
  });
  // (contiguous-view ?shape): a row-major view of a buffer of exactly ?shape.
  g.register_primitive("contiguous-view", [](std::span<const Value> a) -> std::optional<Value> {
    if (a.size() != 1 || a[0].kind() != ValueKind::ExprList) return std::nullopt;
    auto s = a[0].as_expr_list();
    return encode_view(ShapeTracker::contiguous(Shape(s.begin(), s.end())));
  });
  // (list-len ?l) and (list-get ?l i): length and element of an ExprList (a shape).
  g.register_primitive("list-len", [](std::span<const Value> a) -> std::optional<Value> {
    if (a.size() != 1 || a[0].kind() != ValueKind::ExprList) return std::nullopt;
    return Value::i64(static_cast<int64_t>(a[0].as_expr_list().size()));
  });
  g.register_primitive("list-get", [](std::span<const Value> a) -> std::optional<Value> {
    if (a.size() != 2 || a[0].kind() != ValueKind::ExprList || a[1].kind() != ValueKind::I64) return std::nullopt;
    auto l = a[0].as_expr_list();
    int64_t i = a[1].as_i64();
    if (i < 0) i += static_cast<int64_t>(l.size());  // -1: the last element
    if (i < 0 || static_cast<size_t>(i) >= l.size()) return std::nullopt;
    return Value::expr(l[static_cast<size_t>(i)]);
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

// The stride of a view axis: offset(z) == stride * z + c with no padding.
std::optional<Expression> view_axis_stride(const ViewDim& d) {
  if (!(d.valid == Expression(1))) return std::nullopt;
  Expression z = Expression::index();
  Expression at0 = d.offset.substitute(Expression::kIndexName, 0);
  Expression stride = d.offset.substitute(Expression::kIndexName, 1) - at0;
  if (!(stride * z + at0 == d.offset) && !(at0 + stride * z == d.offset)) return std::nullopt;
  return stride;
}

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

std::vector<std::string> core_rule_files() {
  return {std::string(LUMINAL_SOURCE_DIR) + "/src/core/core.egg"};
}

LoweredGraph lower_to_egraph(const Graph& g, const std::function<void(egraph::EGraph&)>& register_primitives) {
  LoweredGraph out;
  out.source = &g;
  out.egraph = std::make_unique<EGraph>();
  EGraph& eg = *out.egraph;
  auto sig_ptr = std::make_shared<Signature>(declare_signature(eg));
  out.signature = sig_ptr;
  const Signature& sig = *sig_ptr;
  register_view_primitives(eg);
  if (register_primitives) register_primitives(eg);
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
    LUMINAL_CHECK(n.op != OpKind::BackendOp, "lower_to_egraph: node ", i, " is a backend op (", n.backend->name,
                  "); only primitive graphs can be compiled");
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

namespace {

// Check one IR constructor that is not a primitive against the backend-op convention.
BackendOpLayout validate_backend_op(const EGraph& eg, const Signature& sig, egraph::OpId id) {
  const egraph::OpInfo& info = eg.op(id);
  auto where = info.loc.file.empty() ? std::string("<C++>") : info.loc.to_string();
  auto sort_name = [&](size_t k) { return eg.sort(info.args[k]).name; };
  auto bad = [&](size_t k, const std::string& expected) {
    fail(where, ": backend op '", info.name, "' breaks the declaration convention: argument ", k + 1, " is ",
         k < info.args.size() ? sort_name(k) : std::string("missing"), ", expected ", expected,
         " (convention: (constructor ", info.name,
         " (String ExprList <attributes: i64 f64 String Expr ExprList>... <inputs: IR ExprList pairs, or one IList>) IR))");
  };
  BackendOpLayout layout;
  layout.name = info.name;
  if (info.args.size() < 1 || info.args[0] != sig.string) bad(0, "String (the dtype)");
  if (info.args.size() < 2 || info.args[1] != sig.exprlist) bad(1, "ExprList (the shape)");
  size_t k = 2;
  for (; k < info.args.size(); ++k) {
    egraph::SortId s = info.args[k];
    if (s == sig.ir || s == sig.ilist) break;
    if (s == sig.i64) layout.attrs.push_back(ValueKind::I64);
    else if (s == sig.f64) layout.attrs.push_back(ValueKind::F64);
    else if (s == sig.string) layout.attrs.push_back(ValueKind::String);
    else if (s == sig.expr) layout.attrs.push_back(ValueKind::Expr);
    else if (s == sig.exprlist) layout.attrs.push_back(ValueKind::ExprList);
    else bad(k, "an attribute (i64, f64, String, Expr, ExprList) or an input (IR, IList)");
  }
  layout.first_input = k;
  if (k < info.args.size() && info.args[k] == sig.ilist) {
    if (k + 1 != info.args.size()) bad(k + 1, "nothing after the IList of inputs");
    layout.input_list = true;
    return layout;
  }
  for (; k < info.args.size(); k += 2) {
    if (info.args[k] != sig.ir) bad(k, "IR (an input)");
    if (k + 1 >= info.args.size() || info.args[k + 1] != sig.exprlist) bad(k + 1, "ExprList (the view of the input before it)");
  }
  return layout;
}

// The IR nodes that extraction understands: primitives and validated backend ops.
bool is_ir_op(const LoweredGraph& lowered, egraph::OpId op) {
  const Signature& sig = *lowered.signature;
  return sig.kind_of.count(op) || lowered.backend_ops.count(op);
}

// A shape at the graph's representative dims (set_dim); a dim with no value, or 0, counts
// as 1 (decode-sized). A KV length of 1 would make
// attention's [.., seq, kv_len, head_dim] product look as small as its output.
std::vector<int64_t> shape_at_representative_dims(std::span<const Expression> shape, const DimMap& dims) {
  std::vector<int64_t> out;
  out.reserve(shape.size());
  for (const auto& d : shape) {
    Expression e = d;
    for (const auto& v : d.variables()) {
      auto it = dims.find(v);
      e = e.substitute(v, it != dims.end() && it->second > 0 ? it->second : 1);
    }
    out.push_back(std::max<int64_t>(e.as_constant().value_or(1), 1));
  }
  return out;
}

// Constructor cost scaled by the elements the node writes (a materialised product k times
// larger than its sum costs k times more), plus the children; +inf for nodes extraction
// cannot turn into a program.
egraph::CostFn extraction_cost(const LoweredGraph& lowered, const DimMap* at_dims = nullptr,
                               const BackendOpCost* op_cost = nullptr) {
  const Signature& sig = *lowered.signature;
  static const DimMap no_dims;
  const DimMap* dims = at_dims ? at_dims : lowered.source ? &lowered.source->dim_map() : &no_dims;
  return [&lowered, &sig, dims, op_cost](const EGraph& g, egraph::NodeId n, std::span<const double> child_costs) {
    egraph::OpId op = g.node(n).op;
    egraph::SortId sort = g.op(op).sort;
    if (sort != sig.ir) return egraph::ast_size(g, n, child_costs);
    if (!is_ir_op(lowered, op)) return std::numeric_limits<double>::infinity();
    const auto shape = shape_at_representative_dims(g.node_arg(n, 1).as_expr_list(), *dims);
    std::optional<double> own;
    if (op_cost && *op_cost && lowered.backend_ops.count(op)) own = (*op_cost)(g.op(op).name, shape);
    double elements = 1;
    for (int64_t d : shape) elements *= static_cast<double>(d);
    double c = own ? *own : g.op(op).cost * (1.0 + elements / 4096.0);
    for (double x : child_costs) c += x;
    return c;
  };
}

}  // namespace

void load_rule_files(LoweredGraph& lowered, const std::vector<std::string>& files) {
  EGraph& eg = *lowered.egraph;
  const Signature& sig = *lowered.signature;
  for (const auto& f : files) {
    size_t before = eg.num_ops();
    eg.load_file(f);
    for (egraph::OpId id = static_cast<egraph::OpId>(before); id < eg.num_ops(); ++id)
      if (eg.op(id).sort == sig.ir) lowered.backend_ops.emplace(id, validate_backend_op(eg, sig, id));
  }
}

uint64_t structural_hash(const Graph& g) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](uint64_t v) {
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h *= 0x100000001b3ull;
  };
  auto mix_str = [&](std::string_view s) { mix(std::hash<std::string_view>{}(s)); };
  auto mix_expr = [&](const Expression& e) { mix(e.hash()); };
  for (const Node& n : g.nodes()) {
    mix(static_cast<uint64_t>(n.op));
    mix(static_cast<uint64_t>(n.dtype));
    mix(n.shape.size());
    for (const auto& d : n.shape) mix_expr(d);
    mix_str(n.label);
    uint64_t bits;
    std::memcpy(&bits, &n.constant, sizeof bits);
    mix(bits);
    mix_expr(n.iota_expr);
    mix(static_cast<uint64_t>(n.axis));
    mix(n.persist);
    mix(n.updates);
    mix(reinterpret_cast<uintptr_t>(n.custom.get()));
    if (n.backend) mix_str(n.backend->to_string());
    mix(n.inputs.size());
    for (const auto& in : n.inputs) {
      mix(in.node);
      mix(in.view.rank());
      for (const auto& d : in.view.dims()) {
        mix_expr(d.size);
        mix_expr(d.offset);
        mix_expr(d.valid);
      }
      mix_expr(in.view.base_offset());
      mix_expr(in.view.base_valid());
    }
  }
  return h;
}

ChoiceSpace choice_space(const LoweredGraph& lowered) {
  const EGraph& eg = *lowered.egraph;
  egraph::Extractor costs(eg, extraction_cost(lowered));
  auto extractable = [&](egraph::NodeId n) {
    if (eg.op(eg.node(n).op).unextractable) return false;
    if (eg.op(eg.node(n).op).sort == lowered.signature->ir && !is_ir_op(lowered, eg.node(n).op)) return false;
    for (ClassId ch : eg.children(n))
      if (!std::isfinite(costs.cost(ch))) return false;
    return true;
  };
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
  std::unordered_map<ClassId, std::vector<egraph::NodeId>> options;
  while (!stack.empty()) {
    ClassId c = stack.back();
    stack.pop_back();
    reachable.push_back(c);
    auto& opts = options[c];
    for (egraph::NodeId n : eg.class_nodes(c)) {
      if (!extractable(n)) continue;
      opts.push_back(n);
      for (ClassId ch : eg.children(n)) visit(ch);
    }
  }
  std::sort(reachable.begin(), reachable.end());
  space.reachable_classes = reachable.size();
  space.slot_of.assign(seen.size(), -1);
  for (ClassId c : reachable) {
    auto& nodes = options[c];
    std::sort(nodes.begin(), nodes.end());
    if (nodes.size() < 2) continue;
    space.slot_of[c] = static_cast<int>(space.slots.size());
    space.slots.push_back(c);
    space.options.push_back(std::move(nodes));
  }
  return space;
}

std::vector<uint32_t> cheapest_genome(const LoweredGraph& lowered, const ChoiceSpace& space, const DimMap* dims,
                                      const BackendOpCost& op_cost) {
  egraph::Extractor costs(*lowered.egraph, extraction_cost(lowered, dims, &op_cost));
  std::vector<uint32_t> genome(space.slots.size(), 0);
  for (size_t s = 0; s < space.slots.size(); ++s) {
    auto best = costs.best_node(space.slots[s]);
    if (!best) continue;
    auto it = std::find(space.options[s].begin(), space.options[s].end(), *best);
    if (it != space.options[s].end()) genome[s] = static_cast<uint32_t>(it - space.options[s].begin());
  }
  return genome;
}

std::vector<uint32_t> source_genome(const LoweredGraph&, const ChoiceSpace& space) {
  return std::vector<uint32_t>(space.slots.size(), 0);  // the earliest node of each class
}

std::optional<Extracted> extract(const LoweredGraph& lowered, const ChoiceSpace& space,
                                 const std::vector<uint32_t>& genome) {
  const EGraph& eg = *lowered.egraph;
  const Signature& sig = *lowered.signature;
  Extracted out;
  std::unordered_map<ClassId, NodeId> done;      // class -> program node
  std::unordered_map<ClassId, char> on_path;
  // The user's op each class came from, for error messages in programs.
  std::unordered_map<ClassId, const Node*> source_node;
  for (NodeId i = 0; i < lowered.source->size(); ++i)
    source_node.emplace(eg.find(lowered.class_of[i]), &lowered.source->node(i));

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
  // The (input, view) cells of an IList class; nullopt when it holds no ICons/INil chain.
  auto walk_list = [&](ClassId list, std::vector<std::pair<ClassId, Value>>& inputs) {
    for (size_t guard = 0; guard < 1'000'000; ++guard) {
      std::optional<egraph::NodeId> cell;
      for (egraph::NodeId n : eg.class_nodes(eg.find(list))) {
        egraph::OpId op = eg.node(n).op;
        if ((op == sig.icons || op == sig.inil) && (!cell || n < *cell)) cell = n;
      }
      if (!cell) return false;
      if (eg.node(*cell).op == sig.inil) return true;
      inputs.emplace_back(eg.node_arg(*cell, 0).as_class(), eg.node_arg(*cell, 1));
      list = eg.node_arg(*cell, 2).as_class();
    }
    return false;
  };

  // Iterative would be safer for very deep graphs; segments keep depth moderate.
  std::function<std::optional<NodeId>(ClassId)> build = [&](ClassId c) -> std::optional<NodeId> {
    c = eg.find(c);
    if (auto it = done.find(c); it != done.end()) return it->second;
    if (on_path[c]) return std::nullopt;  // cycle
    on_path[c] = 1;
    std::optional<NodeId> result;
    for (egraph::NodeId en : options(c)) {
      egraph::OpId eop = eg.node(en).op;
      auto kind = sig.kind_of.find(eop);
      auto backend = lowered.backend_ops.find(eop);
      if (kind == sig.kind_of.end() && backend == lowered.backend_ops.end()) continue;  // not extractable
      if (eg.op(eop).unextractable) continue;
      OpKind op = kind != sig.kind_of.end() ? kind->second : OpKind::BackendOp;
      const Node* proto = nullptr;
      Node n;
      n.op = op;
      n.dtype = parse_dtype(eg.node_arg(en, 0).as_string());
      auto shape = eg.node_arg(en, 1).as_expr_list();
      n.shape.assign(shape.begin(), shape.end());
      size_t arg = 2;
      NodeId source_id = kNoNode;
      bool list_inputs = op == OpKind::CustomOp;
      size_t fixed_inputs = op == OpKind::BackendOp ? 0 : static_cast<size_t>(std::max(op_arity(op), 0));
      if (op == OpKind::BackendOp) {
        const BackendOpLayout& layout = backend->second;
        auto call = std::make_shared<BackendOpCall>();
        call->name = layout.name;
        for (ValueKind k : layout.attrs) {
          Value v = eg.node_arg(en, arg++);
          switch (k) {
            case ValueKind::I64: call->attrs.emplace_back(v.as_i64()); break;
            case ValueKind::F64: call->attrs.emplace_back(v.as_f64()); break;
            case ValueKind::String: call->attrs.emplace_back(std::string(v.as_string())); break;
            case ValueKind::Expr: call->attrs.emplace_back(v.as_expr()); break;
            default: {
              auto l = v.as_expr_list();
              call->attrs.emplace_back(std::vector<Expression>(l.begin(), l.end()));
            }
          }
        }
        n.backend = std::move(call);
        list_inputs = layout.input_list;
        fixed_inputs = (eg.op(eop).args.size() - layout.first_input) / 2;
      } else {
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
      }
      bool ok = true;
      std::vector<std::pair<ClassId, Value>> inputs;
      if (list_inputs) {
        ok = walk_list(eg.node_arg(en, arg).as_class(), inputs);
      } else {
        for (size_t k = 0; k < fixed_inputs; ++k, arg += 2)
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
      if (auto src = source_node.find(c); src != source_node.end()) n.user_op = src->second->user_op;
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
