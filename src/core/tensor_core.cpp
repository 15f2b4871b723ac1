// Core of the tensor API: node construction, broadcasting, the primitive wrappers,
// arithmetic, comparisons, logic and selection.
#include <cmath>

#include "tensor_internal.hpp"

namespace luminal {
namespace detail {

int normalize_axis(int axis, size_t rank, const char* op) {
  int r = static_cast<int>(rank);
  LUMINAL_CHECK(axis >= -r && axis < r, op, ": axis ", axis, " out of range for a tensor of rank ", rank);
  return axis < 0 ? axis + r : axis;
}

std::vector<int> normalize_axes(std::vector<int> axes, size_t rank, const char* op) {
  if (axes.empty()) {
    for (size_t i = 0; i < rank; ++i) axes.push_back(static_cast<int>(i));
    return axes;
  }
  for (auto& a : axes) a = normalize_axis(a, rank, op);
  std::sort(axes.begin(), axes.end());
  LUMINAL_CHECK(std::adjacent_find(axes.begin(), axes.end()) == axes.end(), op, ": repeated axis");
  return axes;
}

GraphTensor make_node(Graph& g, Node node) {
  Shape shape = node.shape;
  DType dt = node.dtype;
  NodeId id = g.add_node(std::move(node));
  return GraphTensor(&g, id, ShapeTracker::contiguous(shape), dt);
}

GraphTensor to_float(const GraphTensor& x) { return is_float(x.dtype()) ? x : x.cast(DType::F32); }

GraphTensor unary(OpKind op, const GraphTensor& x0) {
  GraphTensor x = to_float(x0);
  Node n;
  n.op = op;
  n.dtype = x.dtype();
  n.shape = x.shape();
  n.inputs = {{x.id(), x.view()}};
  return make_node(x.graph(), std::move(n));
}

std::pair<GraphTensor, GraphTensor> broadcast_pair(const GraphTensor& a, const GraphTensor& b) {
  LUMINAL_CHECK(&a.graph() == &b.graph(), "tensors belong to different graphs");
  Shape shape = broadcast_shapes(a.shape(), b.shape());
  DType dt = promote(a.dtype(), b.dtype());
  return {a.expand(shape).cast(dt), b.expand(shape).cast(dt)};
}

GraphTensor binary(OpKind op, const GraphTensor& a0, const GraphTensor& b0) {
  auto [a, b] = broadcast_pair(a0, b0);
  Node n;
  n.op = op;
  n.dtype = op == OpKind::LessThan ? DType::Bool : a.dtype();
  n.shape = a.shape();
  n.inputs = {{a.id(), a.view()}, {b.id(), b.view()}};
  return make_node(a.graph(), std::move(n));
}

GraphTensor reduce(OpKind op, const GraphTensor& x, int axis) {
  axis = normalize_axis(axis, x.rank(), op_name(op).data());
  Node n;
  n.op = op;
  n.dtype = x.dtype();
  n.shape = x.shape();
  n.shape.erase(n.shape.begin() + axis);
  n.axis = axis;
  n.inputs = {{x.id(), x.view()}};
  return make_node(x.graph(), std::move(n));
}

GraphTensor expr_scalar(Graph& g, const Expression& value, DType dtype) { return g.iota(value, {}, dtype); }

GraphTensor copy(const GraphTensor& x) {
  Node n;
  n.op = OpKind::Cast;
  n.dtype = x.dtype();
  n.shape = x.shape();
  n.inputs = {{x.id(), x.view()}};
  return make_node(x.graph(), std::move(n));
}

}  // namespace detail

using namespace detail;

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    Expression da = i < rank - a.size() ? Expression(1) : a[i - (rank - a.size())];
    Expression db = i < rank - b.size() ? Expression(1) : b[i - (rank - b.size())];
    if (da == db || db == Expression(1)) out[i] = da;
    else if (da == Expression(1)) out[i] = db;
    else fail("cannot broadcast shapes ", to_string(a), " and ", to_string(b), ": dimension ", i, " is ", da,
              " vs ", db);
  }
  return out;
}

GraphTensor scalar_like(const GraphTensor& like, double value) {
  // A Python scalar keeps the tensor's dtype unless it is a float meeting an int tensor.
  DType dt = like.dtype();
  if (!is_float(dt) && value != std::floor(value)) dt = DType::F32;
  if (dt == DType::Bool && value != 0 && value != 1) dt = DType::I64;
  return like.graph().constant(value, dt);
}

Expression GraphTensor::dim(int axis) const { return view_.dims()[normalize_axis(axis, rank(), "dim")].size; }

GraphTensor GraphTensor::output() const { return output(""); }

GraphTensor GraphTensor::output(std::string name) const {
  Node n;
  n.op = OpKind::Output;
  n.dtype = dtype_;
  n.shape = shape();
  n.label = std::move(name);
  n.inputs = {{id_, view_}};
  return make_node(*graph_, std::move(n));
}

GraphTensor GraphTensor::persist() const {
  Node& n = graph_->mutable_node(id_);
  LUMINAL_CHECK(n.op == OpKind::Input, "persist: only input tensors can be persisted; '", op_name(n.op),
                "' is computed");
  n.persist = true;
  return *this;
}

GraphTensor GraphTensor::contiguous() const {
  const Node& n = graph_->node(id_);
  if (view_.is_contiguous() && n.shape == shape()) return *this;
  return copy(*this);
}

GraphTensor GraphTensor::cast(DType dtype) const {
  if (dtype == dtype_) return *this;
  Node n;
  n.op = OpKind::Cast;
  n.dtype = dtype;
  n.shape = shape();
  n.inputs = {{id_, view_}};
  return make_node(*graph_, std::move(n));
}

// ---- arithmetic ----
GraphTensor operator+(const GraphTensor& a, const GraphTensor& b) {
  if (a.dtype() == DType::Bool && b.dtype() == DType::Bool) return a.logical_or(b);
  return binary(OpKind::Add, a, b);
}
GraphTensor operator*(const GraphTensor& a, const GraphTensor& b) { return binary(OpKind::Mul, a, b); }
GraphTensor operator-(const GraphTensor& a) {
  LUMINAL_CHECK(a.dtype() != DType::Bool, "negation of a Bool tensor; use logical_not");
  return a * scalar_like(a, -1);
}
GraphTensor operator-(const GraphTensor& a, const GraphTensor& b) {
  auto [x, y] = broadcast_pair(a, b);
  return x + (-y);
}
GraphTensor operator/(const GraphTensor& a, const GraphTensor& b) {
  auto [x, y] = broadcast_pair(to_float(a), to_float(b));
  return x * unary(OpKind::Recip, y);
}
GraphTensor operator%(const GraphTensor& a, const GraphTensor& b) { return binary(OpKind::Mod, a, b); }
GraphTensor operator+(const GraphTensor& a, double b) { return a + scalar_like(a, b); }
GraphTensor operator-(const GraphTensor& a, double b) { return a + scalar_like(a, -b); }
GraphTensor operator*(const GraphTensor& a, double b) { return a * scalar_like(a, b); }
GraphTensor operator/(const GraphTensor& a, double b) {
  GraphTensor x = to_float(a);
  return x * scalar_like(x, 1.0 / b);
}
GraphTensor operator%(const GraphTensor& a, double b) { return a % scalar_like(a, b); }
GraphTensor operator+(double a, const GraphTensor& b) { return scalar_like(b, a) + b; }
GraphTensor operator-(double a, const GraphTensor& b) { return scalar_like(b, a) - b; }
GraphTensor operator*(double a, const GraphTensor& b) { return scalar_like(b, a) * b; }
GraphTensor operator/(double a, const GraphTensor& b) { return scalar_like(to_float(b), a) / b; }

GraphTensor GraphTensor::floor_div(const GraphTensor& b) const {
  auto [x, y] = broadcast_pair(*this, b);
  if (is_float(x.dtype())) {
    // As torch (and Python): (x - x mod y) / y, rounded to the integer it nearly is; so an
    // infinite x gives NaN, and a zero divisor gives x / 0 (+-inf or NaN).
    GraphTensor q = ((x - x % y) / y).round();
    return where(y.eq(0.0), x / y, q);
  }
  // Integers: m = x - x mod y is an exact multiple of y. F64 holds 53 bits, so estimate the
  // quotient in F64, then add the exact correction (m - q0*y) / y, a small integer.
  GraphTensor m = (x - x % y).cast(DType::I64);
  GraphTensor y64 = y.cast(DType::I64);
  GraphTensor q0 = (m.cast(DType::F64) / y64.cast(DType::F64)).round().cast(DType::I64);
  GraphTensor resid = m - q0 * y64;
  GraphTensor q = q0 + (resid.cast(DType::F64) / y64.cast(DType::F64)).round().cast(DType::I64);
  return q.cast(x.dtype());
}

GraphTensor GraphTensor::abs() const {
  if (dtype_ == DType::Bool || dtype_ == DType::U8) return *this;
  return where(lt(0.0), -*this, *this);
}
GraphTensor GraphTensor::sign() const {
  if (dtype_ == DType::Bool) return *this;
  return gt(0.0).cast(dtype_) - lt(0.0).cast(dtype_);
}
GraphTensor GraphTensor::pow(const GraphTensor& e) const {
  DType int_result = promote(dtype_, e.dtype());
  if (!is_float(int_result)) {
    // Integer ** integer stays integer, as in torch, and wraps like repeated multiplication:
    // square-and-multiply in I64 over the exponent's low 7 bits; exponents >= 128 (which
    // overflow unless |base| <= 1) fall back to F64.
    DType out = int_result == DType::Bool ? DType::I64 : int_result;
    auto [b, ex] = broadcast_pair(cast(DType::I64), e.cast(DType::I64));
    GraphTensor result = scalar_like(b, 1).expand(b.shape());
    GraphTensor base = b, rem = ex;
    for (int bit = 0; bit < 7; ++bit) {
      GraphTensor low = rem % 2.0;
      result = where(low.eq(1.0), result * base, result);
      base = base * base;
      rem = ((rem - low).cast(DType::F64) * 0.5).cast(DType::I64);  // exact: rem < 2^53 here
    }
    GraphTensor wide = b.cast(DType::F64).pow(ex.cast(DType::F64)).round().cast(DType::I64);
    return where(ex.ge(128.0), wide, result).cast(out);
  }
  auto [x, y] = broadcast_pair(to_float(*this), to_float(e));
  // x^y = 2^(y*log2|x|), negated for negative x with odd integer y; NaN for negative x
  // with non-integer y comes out of log2 of a negative number.
  GraphTensor mag = (y * x.abs().log2()).exp2();
  GraphTensor y_int = y.eq(y.floor());
  GraphTensor y_odd = y_int.logical_and((y % 2.0).eq(1.0));
  GraphTensor neg = x.lt(0.0);
  GraphTensor nan = scalar_like(x, NAN);
  GraphTensor result = where(neg.logical_and(y_odd), -mag, mag);
  result = where(neg.logical_and(y_int.logical_not()), nan, result);
  // x^0 = 1 and 1^y = 1 for every x and y, NaN included (0 * log2(0) would give NaN).
  GraphTensor one = scalar_like(x, 1);
  return where(y.eq(0.0).logical_or(x.eq(1.0)), one, result);
}
GraphTensor GraphTensor::pow(double e) const {
  if (!is_float(dtype_) && e == std::floor(e) && e >= 0) {  // int ** non-negative int stays int
    if (e == 1) return *this;
    if (e == 2) return *this * *this;
    return pow(scalar_like(*this, e));
  }
  GraphTensor x = to_float(*this);
  if (e == 1) return x;
  if (e == 2) return x * x;
  if (e == 3) return x * x * x;
  if (e == 0.5) return x.sqrt();
  if (e == -1) return x.reciprocal();
  return x.pow(scalar_like(x, e));
}
// torch.maximum/minimum propagate NaN from either side: take y when it wins or is NaN.
GraphTensor GraphTensor::maximum(const GraphTensor& b) const {
  auto [x, y] = broadcast_pair(*this, b);
  GraphTensor take_y = x.lt(y);
  if (is_float(y.dtype())) take_y = take_y.logical_or(y.ne(y));
  return where(take_y, y, x);
}
GraphTensor GraphTensor::minimum(const GraphTensor& b) const {
  auto [x, y] = broadcast_pair(*this, b);
  GraphTensor take_y = y.lt(x);
  if (is_float(y.dtype())) take_y = take_y.logical_or(y.ne(y));
  return where(take_y, y, x);
}
GraphTensor GraphTensor::maximum(double b) const { return maximum(scalar_like(*this, b)); }
GraphTensor GraphTensor::minimum(double b) const { return minimum(scalar_like(*this, b)); }
GraphTensor GraphTensor::clamp(std::optional<double> lo, std::optional<double> hi) const {
  GraphTensor r = *this;
  if (lo) r = r.maximum(*lo);
  if (hi) r = r.minimum(*hi);
  return r;
}

// ---- comparisons and logic ----
GraphTensor GraphTensor::lt(const GraphTensor& b) const { return binary(OpKind::LessThan, *this, b); }
GraphTensor GraphTensor::gt(const GraphTensor& b) const { return binary(OpKind::LessThan, b, *this); }
namespace {
// NaN is the one value that is neither below +inf nor above -inf.
GraphTensor not_nan(const GraphTensor& x) {
  if (!is_float(x.dtype())) return scalar_like(x, 1).cast(DType::Bool).expand(x.shape());
  GraphTensor inf = x.graph().constant(INFINITY, x.dtype());
  return x.lt(inf).logical_or((-inf).lt(x));
}
}  // namespace

GraphTensor GraphTensor::le(const GraphTensor& b) const {
  auto [x, y] = broadcast_pair(*this, b);
  GraphTensor r = y.lt(x).logical_not();
  return is_float(x.dtype()) ? r.logical_and(not_nan(x)).logical_and(not_nan(y)) : r;
}
GraphTensor GraphTensor::ge(const GraphTensor& b) const { return b.le(*this); }
GraphTensor GraphTensor::eq(const GraphTensor& b) const {
  auto [x, y] = broadcast_pair(*this, b);
  GraphTensor r = x.lt(y).logical_or(y.lt(x)).logical_not();
  return is_float(x.dtype()) ? r.logical_and(not_nan(x)).logical_and(not_nan(y)) : r;
}
GraphTensor GraphTensor::ne(const GraphTensor& b) const { return eq(b).logical_not(); }
GraphTensor GraphTensor::lt(double b) const { return lt(scalar_like(*this, b)); }
GraphTensor GraphTensor::le(double b) const { return le(scalar_like(*this, b)); }
GraphTensor GraphTensor::gt(double b) const { return gt(scalar_like(*this, b)); }
GraphTensor GraphTensor::ge(double b) const { return ge(scalar_like(*this, b)); }
GraphTensor GraphTensor::eq(double b) const { return eq(scalar_like(*this, b)); }
GraphTensor GraphTensor::ne(double b) const { return ne(scalar_like(*this, b)); }

GraphTensor GraphTensor::logical_not() const {
  GraphTensor b = cast(DType::Bool);
  return b.lt(b.graph().constant(1, DType::Bool));
}
GraphTensor GraphTensor::logical_and(const GraphTensor& b) const {
  return binary(OpKind::Mul, cast(DType::Bool), b.cast(DType::Bool));
}
GraphTensor GraphTensor::logical_or(const GraphTensor& b) const {
  return binary(OpKind::Add, cast(DType::Bool), b.cast(DType::Bool));  // Bool addition saturates at 1
}

GraphTensor GraphTensor::where(const GraphTensor& cond, const GraphTensor& a, const GraphTensor& b) {
  // Select without arithmetic on the unselected value (so inf/NaN there cannot leak):
  // concatenate [a, b] and gather element i or i + N.
  Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape()), b.shape());
  DType dt = promote(a.dtype(), b.dtype());
  GraphTensor x = a.expand(shape).cast(dt).reshape({product(shape)});
  GraphTensor y = b.expand(shape).cast(dt).reshape({product(shape)});
  Expression n = product(shape);
  GraphTensor both = GraphTensor::concat({x, y}, 0);
  Graph& g = cond.graph();
  GraphTensor idx = g.iota(Expression::index(), shape, DType::I32);
  GraphTensor pick_b = cond.expand(shape).logical_not().cast(DType::I32);
  idx = idx + pick_b * expr_scalar(g, n);
  Node node;
  node.op = OpKind::Gather;
  node.dtype = dt;
  node.shape = shape;
  node.inputs = {{idx.id(), idx.view()}, {both.id(), both.view()}};
  return make_node(g, std::move(node));
}
GraphTensor GraphTensor::where(const GraphTensor& a, const GraphTensor& b) const { return where(*this, a, b); }

}  // namespace luminal
