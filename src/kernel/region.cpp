// Regions: building them by fusion, and their one-line text form.
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "luminal/error.hpp"
#include "luminal/kernel/kernel.hpp"

namespace luminal::kernel {
namespace {

NodeId output_node(const Graph& g) {
  auto outs = g.outputs();
  LUMINAL_CHECK(outs.size() == 1, "region: expected exactly one Output node, found ", outs.size());
  return outs[0];
}

// Append `src`'s nodes except its Output to `dst`; returns the node whose contiguous
// buffer is src's result: the Output's input, or an identity Cast of it when the
// Output reads a non-contiguous view (a view of a view is not one view).
NodeId append_region(Graph& dst, const Graph& src) {
  NodeId out = output_node(src);
  std::vector<NodeId> map(src.size(), kNoNode);
  for (NodeId i = 0; i < src.size(); ++i) {
    if (i == out) continue;
    Node n = src.node(i);
    for (auto& in : n.inputs) in.node = map[in.node];
    map[i] = dst.add_node(std::move(n));
  }
  const Node& o = src.node(out);
  NodeId result = map[o.inputs[0].node];
  const ShapeTracker& view = o.inputs[0].view;
  if (view.is_contiguous() && view.shape() == dst.node(result).shape) return result;
  Node copy;
  copy.op = OpKind::Cast;
  copy.dtype = o.dtype;
  copy.shape = o.shape;
  copy.inputs = {{result, view}};
  return dst.add_node(std::move(copy));
}


// Does the region compute anything (beyond reading inputs and making indexes)?
bool computes(const Graph& g) {
  for (const Node& n : g.nodes())
    if (n.op != OpKind::Input && n.op != OpKind::Output && n.op != OpKind::Iota && n.op != OpKind::Constant) return true;
  return false;
}

std::optional<Region> build(const Node& op, std::span<const FuseOperand> operands, bool fresh_only) {
  LUMINAL_CHECK(op.op != OpKind::Input && op.op != OpKind::Output, "fuse: ", op_name(op.op), " is not a region op");
  if (op.op == OpKind::CustomOp) return std::nullopt;
  // A computed operand that a Gather replicates stays materialised (replicated_by_gather).
  if (!fresh_only && op.op == OpKind::Gather && operands.size() == 2 && operands[1].region &&
      computes(operands[1].region->graph) &&
      gather_replicates(op.shape, operands[1].region->graph.node(output_node(operands[1].region->graph)).shape))
    return std::nullopt;
  Region r;
  Node n;
  n.op = op.op;
  n.dtype = op.dtype;
  n.shape = op.shape;
  n.axis = op.axis;
  n.constant = op.constant;
  n.iota_expr = op.iota_expr;
  for (const auto& operand : operands) {
    if (operand.region && !fresh_only) {
      n.inputs.push_back({append_region(r.graph, operand.region->graph), operand.view});
    } else {
      Node in;
      in.op = OpKind::Input;
      in.dtype = operand.region ? operand.region->graph.node(output_node(operand.region->graph)).dtype : operand.dtype;
      in.shape = operand.region ? operand.region->graph.node(output_node(operand.region->graph)).shape : operand.shape;
      n.inputs.push_back({r.graph.add_node(std::move(in)), operand.view});
    }
  }
  Node out;
  out.op = OpKind::Output;
  out.dtype = n.dtype;
  out.shape = n.shape;
  NodeId id = r.graph.add_node(std::move(n));
  out.inputs = {{id, ShapeTracker::contiguous(out.shape)}};
  r.graph.add_node(std::move(out));
  int k = 0;
  for (NodeId i : r.graph.inputs()) r.graph.mutable_node(i).label = "in" + std::to_string(k++);
  // The lowering check is costly and the rules call fuse once per match, so skip it
  // where the answer is known: an elementwise op whose operand regions (each already
  // lowered when it was built) are read at the same index (identity views), at most one
  // of them holding reductions, computes in that region's loops with nothing recomputed.
  // Regions of elementwise ops and sources alone always lower.
  auto has_reduction = [](const Graph& g) {
    for (const Node& m : g.nodes())
      if (op_category(m.op) != OpCategory::Unary && op_category(m.op) != OpCategory::Binary &&
          op_category(m.op) != OpCategory::Source && m.op != OpKind::Output)
        return true;
    return false;
  };
  bool known = !fresh_only && (op_category(op.op) == OpCategory::Unary || op_category(op.op) == OpCategory::Binary);
  int reducing = 0;
  for (const auto& operand : operands) {
    if (!known) break;
    if (!operand.region) continue;
    const Node& root = operand.region->graph.node(output_node(operand.region->graph));
    bool identity = operand.view.is_contiguous() && operand.view.shape() == root.shape && root.shape == op.shape;
    bool reduces = has_reduction(operand.region->graph);
    reducing += reduces;
    known = reducing <= 1 && (identity || !reduces);
  }
  if (!known && has_reduction(r.graph) && !lower(r)) return std::nullopt;
  return r;
}

// ---- text form: s-expressions ----
// region := (region node...)    node := (OP DTYPE (shape E...) AXIS CONST IOTA (in ID VIEW)...)
// VIEW := (view BASE_OFFSET BASE_VALID (d SIZE OFFSET VALID)...)
// E := integer | "var" | (K E...) with K one of + * / % min max cdiv < == && || !
constexpr std::pair<ExprKind, std::string_view> kExprOps[] = {
    {ExprKind::Add, "+"},   {ExprKind::Mul, "*"},        {ExprKind::Div, "/"}, {ExprKind::Mod, "%"},
    {ExprKind::Min, "min"}, {ExprKind::Max, "max"},      {ExprKind::CeilDiv, "cdiv"},
    {ExprKind::Lt, "<"},    {ExprKind::Eq, "=="},        {ExprKind::And, "&&"}, {ExprKind::Or, "||"},
    {ExprKind::Not, "!"},
};

void write_expr(std::string& s, const Expression& e) {
  switch (e.kind()) {
    case ExprKind::Num: s += std::to_string(e.constant_value()); return;
    case ExprKind::Var:
      LUMINAL_CHECK(e.var_name().find_first_of("\"\\") == std::string::npos, "serialize: variable name '",
                    e.var_name(), "' contains a quote or backslash");
      s += '"' + e.var_name() + '"';
      return;
    default:
      for (auto [k, name] : kExprOps)
        if (k == e.kind()) {
          s += '(';
          s += name;
          for (const auto& c : e.children()) {
            s += ' ';
            write_expr(s, c);
          }
          s += ')';
          return;
        }
      LUMINAL_ASSERT(false, "unknown expression kind");
  }
}

void write_view(std::string& s, const ShapeTracker& v) {
  s += "(view ";
  write_expr(s, v.base_offset());
  s += ' ';
  write_expr(s, v.base_valid());
  for (const auto& d : v.dims()) {
    s += " (d ";
    write_expr(s, d.size);
    s += ' ';
    write_expr(s, d.offset);
    s += ' ';
    write_expr(s, d.valid);
    s += ')';
  }
  s += ')';
}

std::string format_double(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

// A parsed s-expression.
struct Sx {
  std::string atom;  // empty for lists (quoted strings keep a leading '"')
  std::vector<Sx> list;
  bool is_list = false;
};

class SxReader {
 public:
  explicit SxReader(std::string_view text) : t_(text) {}
  Sx read() {
    skip();
    LUMINAL_CHECK(p_ < t_.size(), "parse_region: unexpected end of text");
    Sx x;
    if (t_[p_] == '(') {
      ++p_;
      x.is_list = true;
      for (skip(); p_ < t_.size() && t_[p_] != ')'; skip()) x.list.push_back(read());
      LUMINAL_CHECK(p_ < t_.size(), "parse_region: missing ')'");
      ++p_;
    } else if (t_[p_] == '"') {
      size_t end = t_.find('"', p_ + 1);
      LUMINAL_CHECK(end != std::string_view::npos, "parse_region: unterminated string at ", p_);
      x.atom = std::string(t_.substr(p_, end - p_));
      p_ = end + 1;
    } else {
      LUMINAL_CHECK(t_[p_] != ')', "parse_region: unexpected ')' at ", p_);
      size_t start = p_;
      while (p_ < t_.size() && !std::isspace(static_cast<unsigned char>(t_[p_])) && t_[p_] != '(' && t_[p_] != ')') ++p_;
      x.atom = std::string(t_.substr(start, p_ - start));
    }
    return x;
  }
  bool at_end() {
    skip();
    return p_ >= t_.size();
  }

 private:
  void skip() {
    while (p_ < t_.size() && std::isspace(static_cast<unsigned char>(t_[p_]))) ++p_;
  }
  std::string_view t_;
  size_t p_ = 0;
};

const Sx& expect_list(const Sx& x, std::string_view head, size_t min_size) {
  LUMINAL_CHECK(x.is_list && x.list.size() >= min_size && !x.list[0].is_list && x.list[0].atom == head,
                "parse_region: expected (", head, " ...) with at least ", min_size - 1, " items");
  return x;
}

int64_t parse_int(const std::string& s) {
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  LUMINAL_CHECK(ec == std::errc() && ptr == s.data() + s.size() && !s.empty(), "parse_region: bad integer '", s, "'");
  return v;
}

Expression parse_expr(const Sx& x) {
  if (!x.is_list) {
    if (!x.atom.empty() && x.atom[0] == '"') return Expression::var(x.atom.substr(1));
    return Expression(parse_int(x.atom));
  }
  LUMINAL_CHECK(!x.list.empty() && !x.list[0].is_list, "parse_region: empty expression");
  for (auto [k, name] : kExprOps)
    if (name == x.list[0].atom) {
      std::vector<Expression> kids;
      for (size_t i = 1; i < x.list.size(); ++i) kids.push_back(parse_expr(x.list[i]));
      size_t want_min = k == ExprKind::Not ? 1 : 2;
      LUMINAL_CHECK(kids.size() >= want_min && (k != ExprKind::Not || kids.size() == 1), "parse_region: operator ",
                    name, " with ", kids.size(), " operands");
      return Expression::raw(k, kids).simplify();
    }
  fail("parse_region: unknown expression operator '", x.list[0].atom, "'");
}

ShapeTracker parse_view(const Sx& x) {
  expect_list(x, "view", 3);
  std::vector<ViewDim> dims;
  for (size_t i = 3; i < x.list.size(); ++i) {
    const Sx& d = expect_list(x.list[i], "d", 4);
    LUMINAL_CHECK(d.list.size() == 4, "parse_region: a view dim has 3 fields");
    dims.push_back({parse_expr(d.list[1]), parse_expr(d.list[2]), parse_expr(d.list[3])});
  }
  return ShapeTracker::from_parts(std::move(dims), parse_expr(x.list[1]), parse_expr(x.list[2]));
}

OpKind parse_op(const std::string& s) {
#define LUMINAL_OP(name, ...) \
  if (s == #name) return OpKind::name;
#include "luminal/ops.def"
#undef LUMINAL_OP
  fail("parse_region: unknown op '", s, "'");
}

}  // namespace

std::optional<Region> fuse(const Node& op, std::span<const FuseOperand> operands) {
  return build(op, operands, false);
}

bool gather_replicates(const Shape& out, const Shape& data) {
  auto n = product(out).as_constant(), d = product(data).as_constant();
  return n && d && *n >= 2 * *d;
}

bool replicated_by_gather(const Graph& g, NodeId value) {
  for (NodeId i = 0; i < g.size(); ++i) {
    const Node& gather = g.node(i);
    if (gather.op != OpKind::Gather || gather.inputs.size() != 2) continue;
    const NodeId data = gather.inputs[1].node;
    if (!gather_replicates(gather.shape, g.node(data).shape)) continue;
    // Is `value` among the data's producers (inputs precede their readers)?
    std::vector<bool> feeds(data + 1, false);
    feeds[data] = true;
    for (NodeId j = data + 1; j-- > 0;) {
      if (!feeds[j]) continue;
      if (j == value) return true;
      for (const auto& in : g.node(j).inputs) feeds[in.node] = true;
    }
  }
  return false;
}
std::optional<Region> singleton(const Node& op, std::span<const FuseOperand> operands) {
  return build(op, operands, true);
}

std::string serialize(const Region& region) {
  std::string s = "(region";
  const Graph& g = region.graph;
  for (NodeId i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    LUMINAL_CHECK(n.op != OpKind::CustomOp, "serialize: a region cannot hold a CustomOp");
    s += " (";
    s += op_name(n.op);
    s += ' ';
    s += dtype_name(n.dtype);
    s += " (shape";
    for (const auto& d : n.shape) {
      s += ' ';
      write_expr(s, d);
    }
    s += ") " + std::to_string(n.axis) + ' ' + format_double(n.constant) + ' ';
    write_expr(s, n.iota_expr);
    for (const auto& in : n.inputs) {
      s += " (in " + std::to_string(in.node) + ' ';
      write_view(s, in.view);
      s += ')';
    }
    s += ')';
  }
  s += ')';
  return s;
}

Region parse_region(std::string_view text) {
  SxReader reader(text);
  Sx top = reader.read();
  LUMINAL_CHECK(reader.at_end(), "parse_region: trailing text after the region");
  expect_list(top, "region", 1);
  Region r;
  int k = 0;
  for (size_t i = 1; i < top.list.size(); ++i) {
    const Sx& x = top.list[i];
    LUMINAL_CHECK(x.is_list && x.list.size() >= 6, "parse_region: node ", i - 1, " needs op, dtype, shape, axis, constant, iota");
    for (size_t f : {0, 1, 3, 4}) LUMINAL_CHECK(!x.list[f].is_list, "parse_region: node ", i - 1, " field ", f, " must be an atom");
    Node n;
    n.op = parse_op(x.list[0].atom);
    LUMINAL_CHECK(n.op != OpKind::CustomOp, "parse_region: a region cannot hold a CustomOp");
    n.dtype = parse_dtype(x.list[1].atom);
    const Sx& shape = expect_list(x.list[2], "shape", 1);
    for (size_t d = 1; d < shape.list.size(); ++d) n.shape.push_back(parse_expr(shape.list[d]));
    n.axis = static_cast<int>(parse_int(x.list[3].atom));
    const std::string& c = x.list[4].atom;
    char* end = nullptr;
    n.constant = std::strtod(c.c_str(), &end);
    LUMINAL_CHECK(!c.empty() && end == c.c_str() + c.size(), "parse_region: bad constant '", c, "'");
    n.iota_expr = parse_expr(x.list[5]);
    for (size_t j = 6; j < x.list.size(); ++j) {
      const Sx& in = expect_list(x.list[j], "in", 3);
      int64_t id = parse_int(in.list[1].atom);
      LUMINAL_CHECK(id >= 0 && id < static_cast<int64_t>(r.graph.size()), "parse_region: input ", id,
                    " of node ", i - 1, " is not an earlier node");
      n.inputs.push_back({static_cast<NodeId>(id), parse_view(in.list[2])});
    }
    if (n.op == OpKind::Input) n.label = "in" + std::to_string(k++);
    r.graph.add_node(std::move(n));
  }
  output_node(r.graph);
  return r;
}

}  // namespace luminal::kernel
