// Core of the tensor API: node construction, broadcasting, the primitive wrappers,
// arithmetic, comparisons, logic and selection.
#include <cmath>

#include "tensor_internal.hpp"

namespace luminal {
namespace detail {

namespace {
thread_local const char* current_user_op = nullptr;
}  // namespace

UserOpScope::UserOpScope(const char* name) : previous_(current_user_op) {
  if (!current_user_op) current_user_op = name;
}
UserOpScope::~UserOpScope() { current_user_op = previous_; }
const char* UserOpScope::current() { return current_user_op; }

int normalize_axis(int axis, size_t rank, const char* op) {
  int r = static_cast<int>(rank);
  LUMINAL_CHECK(axis >= -r && axis < r, UserOpScope::name_or(op), ": axis ", axis,
                " out of range for a tensor of rank ", rank);
  return axis < 0 ? axis + r : axis;
}

std::vector<int> normalize_axes(std::vector<int> axes, size_t rank, const char* op) {
  if (axes.empty()) {
    for (size_t i = 0; i < rank; ++i) axes.push_back(static_cast<int>(i));
    return axes;
  }
  for (auto& a : axes) a = normalize_axis(a, rank, op);
  std::sort(axes.begin(), axes.end());
  LUMINAL_CHECK(std::adjacent_find(axes.begin(), axes.end()) == axes.end(), UserOpScope::name_or(op),
                ": repeated axis");
  return axes;
}

GraphTensor make_node(Graph& g, Node node) {
  if (node.user_op.empty() && UserOpScope::current()) node.user_op = UserOpScope::current();
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
    else fail(UserOpScope::current() ? std::string(UserOpScope::current()) + ": " : std::string(),
              "cannot broadcast shapes ", to_string(a), " and ", to_string(b), ": dimension ", i, " is ", da, " vs ", db);
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
  UserOpScope user_op("cast");
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
  UserOpScope user_op("add");
  if (a.dtype() == DType::Bool && b.dtype() == DType::Bool) return a.logical_or(b);
  return binary(OpKind::Add, a, b);
}
GraphTensor operator*(const GraphTensor& a, const GraphTensor& b) {
  UserOpScope user_op("mul");
  return binary(OpKind::Mul, a, b);
}
GraphTensor operator-(const GraphTensor& a) {
  UserOpScope user_op("neg");
  LUMINAL_CHECK(a.dtype() != DType::Bool, "negation of a Bool tensor; use logical_not");
  return a * scalar_like(a, -1);
}
GraphTensor operator-(const GraphTensor& a, const GraphTensor& b) {
  UserOpScope user_op("sub");
  auto [x, y] = broadcast_pair(a, b);
  return x + (-y);
}
GraphTensor operator/(const GraphTensor& a, const GraphTensor& b) {
  UserOpScope user_op("div");
  auto [x, y] = broadcast_pair(to_float(a), to_float(b));
  return x * unary(OpKind::Recip, y);
}
GraphTensor operator%(const GraphTensor& a, const GraphTensor& b) {
  UserOpScope user_op("remainder");
  return binary(OpKind::Mod, a, b);
}
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
  UserOpScope user_op("floor_div");
  auto [x, y] = broadcast_pair(*this, b);
  if (is_float(x.dtype())) {
    // As torch (and Python): (x - x mod y) / y, rounded to the integer it nearly is; so an
    // infinite x gives NaN, and a zero divisor gives x / 0 (+-inf or NaN).
    // A zero quotient takes the sign of x / y (torch: copysign(0, x / y)).
    GraphTensor q = ((x - x % y) / y).round();
    q = where(q.eq(0.0), (x / y) * 0.0, q);
    return where(y.eq(0.0), x / y, q);
  }
  // Integers: m = x - x mod y is an exact multiple of y. F64 holds 53 bits, so estimate the
  // quotient in F64, then add the exact correction (m - q0*y) / y, a small integer.
  // In I64 from the start: x - x mod y overflows I32 (INT32_MIN - 1).
  GraphTensor x64 = x.cast(DType::I64);
  GraphTensor y64 = y.cast(DType::I64);
  GraphTensor m = x64 - x64 % y64;
  GraphTensor q0 = (m.cast(DType::F64) / y64.cast(DType::F64)).round().cast(DType::I64);
  GraphTensor resid = m - q0 * y64;
  GraphTensor q = q0 + (resid.cast(DType::F64) / y64.cast(DType::F64)).round().cast(DType::I64);
  return q.cast(x.dtype());
}

GraphTensor GraphTensor::abs() const {
  UserOpScope user_op("abs");
  if (dtype_ == DType::Bool || dtype_ == DType::U8) return *this;
  GraphTensor r = where(lt(0.0), -*this, *this);
  return is_float(dtype_) ? r + 0.0 : r;  // -0.0 + 0.0 is +0.0; every other value is unchanged
}
GraphTensor GraphTensor::sign() const {
  UserOpScope user_op("sign");
  if (dtype_ == DType::Bool) return *this;
  return gt(0.0).cast(dtype_) - lt(0.0).cast(dtype_);
}
GraphTensor GraphTensor::pow(const GraphTensor& e) const {
  UserOpScope user_op("pow");
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
  // x^y = 2^(y*log2|x|), with C's (and torch's) special cases:
  //   * the sign: negative for a negative x (-0.0 and -inf included) and an odd integer y;
  //   * NaN for a finite negative x and a non-integer y (-inf ** 2.5 is +inf);
  //   * 1 for y = 0, for x = 1, and for x = -1 with y = +-inf (NaN included).
  GraphTensor mag = (y * x.abs().log2()).exp2();
  GraphTensor y_int = y.eq(y.floor()).logical_or(y.abs().eq(INFINITY));  // +-inf counts as even
  GraphTensor y_odd = y.eq(y.floor()).logical_and((y % 2.0).eq(1.0));
  GraphTensor zero = scalar_like(x, 0);
  GraphTensor neg = x.lt(0.0);
  GraphTensor negative_sign = neg.logical_or(x.eq(0.0).logical_and(x.reciprocal().lt(zero)));  // -0.0
  GraphTensor neg_finite = neg.logical_and(x.gt(-INFINITY));
  GraphTensor nan = scalar_like(x, NAN);
  GraphTensor result = where(negative_sign.logical_and(y_odd), -mag, mag);
  result = where(neg_finite.logical_and(y_int.logical_not()), nan, result);
  GraphTensor one = scalar_like(x, 1);
  GraphTensor minus_one_inf = x.eq(-1.0).logical_and(y.abs().eq(INFINITY));
  return where(y.eq(0.0).logical_or(x.eq(1.0)).logical_or(minus_one_inf), one, result);
}
GraphTensor GraphTensor::pow(double e) const {
  UserOpScope user_op("pow");
  if (!is_float(dtype_) && e == std::floor(e) && e >= 0) {  // int ** non-negative int stays int
    if (e == 1) return *this;
    if (e == 2) return *this * *this;
    return pow(scalar_like(*this, e));
  }
  GraphTensor x = to_float(*this);
  if (e == 1) return x;
  if (e == 2) return x * x;
  if (e == 3) return x * x * x;
  // As torch's scalar-exponent kernel: sqrt and rsqrt, so (-inf) ** 0.5 is NaN there
  // while a tensor exponent 0.5 gives +inf.
  if (e == 0.5) return x.sqrt();
  if (e == -0.5) return x.rsqrt();
  if (e == -1) return x.reciprocal();
  return x.pow(scalar_like(x, e));
}
// torch.maximum/minimum propagate NaN from either side: take y when it wins or is NaN.
GraphTensor GraphTensor::maximum(const GraphTensor& b) const {
  UserOpScope user_op("maximum");
  auto [x, y] = broadcast_pair(*this, b);
  GraphTensor take_y = x.lt(y);
  if (is_float(y.dtype())) take_y = take_y.logical_or(y.ne(y));
  return where(take_y, y, x);
}
GraphTensor GraphTensor::minimum(const GraphTensor& b) const {
  UserOpScope user_op("minimum");
  auto [x, y] = broadcast_pair(*this, b);
  GraphTensor take_y = y.lt(x);
  if (is_float(y.dtype())) take_y = take_y.logical_or(y.ne(y));
  return where(take_y, y, x);
}
GraphTensor GraphTensor::maximum(double b) const {
  UserOpScope user_op("maximum");
  return maximum(scalar_like(*this, b));
}
GraphTensor GraphTensor::minimum(double b) const {
  UserOpScope user_op("minimum");
  return minimum(scalar_like(*this, b));
}
GraphTensor GraphTensor::clamp(std::optional<double> lo, std::optional<double> hi) const {
  UserOpScope user_op("clamp");
  GraphTensor r = *this;
  if (lo) r = r.maximum(*lo);
  if (hi) r = r.minimum(*hi);
  return r;
}

// ---- comparisons and logic ----
GraphTensor GraphTensor::lt(const GraphTensor& b) const {
  UserOpScope user_op("lt");
  return binary(OpKind::LessThan, *this, b);
}
GraphTensor GraphTensor::gt(const GraphTensor& b) const {
  UserOpScope user_op("gt");
  return binary(OpKind::LessThan, b, *this);
}
namespace {
// NaN is the one value that is neither below +inf nor above -inf.
GraphTensor not_nan(const GraphTensor& x) {
  if (!is_float(x.dtype())) return scalar_like(x, 1).cast(DType::Bool).expand(x.shape());
  GraphTensor inf = x.graph().constant(INFINITY, x.dtype());
  return x.lt(inf).logical_or((-inf).lt(x));
}
}  // namespace

GraphTensor GraphTensor::le(const GraphTensor& b) const {
  UserOpScope user_op("le");
  auto [x, y] = broadcast_pair(*this, b);
  GraphTensor r = y.lt(x).logical_not();
  return is_float(x.dtype()) ? r.logical_and(not_nan(x)).logical_and(not_nan(y)) : r;
}
GraphTensor GraphTensor::ge(const GraphTensor& b) const {
  UserOpScope user_op("ge");
  return b.le(*this);
}
GraphTensor GraphTensor::eq(const GraphTensor& b) const {
  UserOpScope user_op("eq");
  auto [x, y] = broadcast_pair(*this, b);
  GraphTensor r = x.lt(y).logical_or(y.lt(x)).logical_not();
  return is_float(x.dtype()) ? r.logical_and(not_nan(x)).logical_and(not_nan(y)) : r;
}
GraphTensor GraphTensor::ne(const GraphTensor& b) const {
  UserOpScope user_op("ne");
  return eq(b).logical_not();
}
GraphTensor GraphTensor::lt(double b) const {
  UserOpScope user_op("lt");
  return lt(scalar_like(*this, b));
}
GraphTensor GraphTensor::le(double b) const {
  UserOpScope user_op("le");
  return le(scalar_like(*this, b));
}
GraphTensor GraphTensor::gt(double b) const {
  UserOpScope user_op("gt");
  return gt(scalar_like(*this, b));
}
GraphTensor GraphTensor::ge(double b) const {
  UserOpScope user_op("ge");
  return ge(scalar_like(*this, b));
}
GraphTensor GraphTensor::eq(double b) const {
  UserOpScope user_op("eq");
  return eq(scalar_like(*this, b));
}
GraphTensor GraphTensor::ne(double b) const {
  UserOpScope user_op("ne");
  return ne(scalar_like(*this, b));
}

GraphTensor GraphTensor::logical_not() const {
  UserOpScope user_op("logical_not");
  GraphTensor b = cast(DType::Bool);
  return b.lt(b.graph().constant(1, DType::Bool));
}
GraphTensor GraphTensor::logical_and(const GraphTensor& b) const {
  UserOpScope user_op("logical_and");
  return binary(OpKind::Mul, cast(DType::Bool), b.cast(DType::Bool));
}
GraphTensor GraphTensor::logical_or(const GraphTensor& b) const {
  UserOpScope user_op("logical_or");
  return binary(OpKind::Add, cast(DType::Bool), b.cast(DType::Bool));  // Bool addition saturates at 1
}

GraphTensor GraphTensor::where(const GraphTensor& cond, const GraphTensor& a, const GraphTensor& b) {
  UserOpScope user_op("where");
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
GraphTensor GraphTensor::where(const GraphTensor& a, const GraphTensor& b) const {
  UserOpScope user_op("where");
  return where(*this, a, b);
}

}  // namespace luminal
