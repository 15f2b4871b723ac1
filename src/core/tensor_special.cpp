// More elementwise functions (log1p, expm1, inverse trig and hyperbolic functions, fmod,
// NaN/inf tests, activations) and bitwise logic, each a composition of the primitives.
//
// Accuracy: F32 and F64 are computed in their own dtype with formulations that stay
// accurate where the naive one cancels (Kahan's log1p/expm1 tricks, argument reduction for
// atan); F16/BF16 compute in F32 and round once, as PyTorch's CPU kernels do. Signed zeros,
// infinities and NaN follow C (and so PyTorch): atan2's quadrants, fmod's sign, trunc(-0.5) = -0.0.
#include <cfloat>
#include <cmath>
#include <numbers>

#include "tensor_internal.hpp"

namespace luminal {
using namespace detail;

namespace {

// Floats as the op computes them: ints and Bool -> F32, F16/BF16 -> F32 (rounded back by the caller).
GraphTensor working_float(const GraphTensor& x) {
  GraphTensor f = to_float(x);
  return is_half_float(f.dtype()) ? f.cast(DType::F32) : f;
}
// The result dtype of a float function of x (PyTorch: ints -> F32, floats keep theirs).
DType result_float(const GraphTensor& x) { return to_float(x).dtype(); }

// The sign bit: true for negatives, -0.0 and -inf (1/-0.0 is -inf); false for NaN.
GraphTensor sign_bit(const GraphTensor& x) {
  return x.lt(0.0).logical_or(x.eq(0.0).logical_and(x.reciprocal().lt(0.0)));
}
// |x| with +0.0 for -0.0 (abs() keeps -0.0, since -0.0 < 0 is false).
GraphTensor magnitude(const GraphTensor& x) { return GraphTensor::where(sign_bit(x), -x, x); }
// mag (>= 0 or NaN) with the sign of s.
GraphTensor with_sign_of(const GraphTensor& mag, const GraphTensor& s) {
  return GraphTensor::where(sign_bit(s), -mag, mag);
}

// atan(t) for t >= 0 (and +inf, NaN): t > 1 uses pi/2 - atan(1/t); t > tan(pi/8) uses
// pi/4 + atan((t-1)/(t+1)); the remaining |u| <= tan(pi/8) sums the alternating series
// u - u^3/3 + ..., 9 terms for F32 (< 1e-8 relative) and 22 for F64 (< 1e-17).
GraphTensor atan_nonnegative(const GraphTensor& t) {
  const int terms = t.dtype() == DType::F64 ? 22 : 9;
  GraphTensor big = t.gt(1.0);
  GraphTensor a = GraphTensor::where(big, t.reciprocal(), t);
  GraphTensor mid = a.gt(0.41421356237309503);
  GraphTensor u = GraphTensor::where(mid, (a - 1.0) / (a + 1.0), a);
  GraphTensor u2 = u * u;
  auto coef = [](int n) { return (n % 2 ? -1.0 : 1.0) / (2 * n + 1); };
  GraphTensor p = u2 * coef(terms - 1) + coef(terms - 2);
  for (int n = terms - 3; n >= 0; --n) p = p * u2 + coef(n);
  GraphTensor r = u * p;
  r = GraphTensor::where(mid, r + std::numbers::pi / 4, r);
  return GraphTensor::where(big, std::numbers::pi / 2 - r, r);
}

// exp(a)/2 for large a without overflowing where exp(a) alone would: h * (h / 2), h = exp(a/2).
GraphTensor half_exp(const GraphTensor& a) {
  GraphTensor h = (a * 0.5).exp();
  return h * (h * 0.5);
}
// Above this |x|, e^-|x| no longer changes sinh/cosh in the dtype.
double hyperbolic_cutoff(DType dt) { return dt == DType::F64 ? 40.0 : 20.0; }

double largest_finite(DType dt) {
  switch (dt) {
    case DType::F16: return 65504.0;
    case DType::BF16: return 3.3895313892515355e38;
    case DType::F32: return FLT_MAX;
    default: return DBL_MAX;
  }
}

GraphTensor all_false(const GraphTensor& x) { return x.graph().constant(0, DType::Bool).expand(x.shape()); }
}  // namespace

GraphTensor GraphTensor::log1p() const {
  UserOpScope user_op("log1p");
  GraphTensor x = working_float(*this);
  // Kahan: with u = 1 + x rounded, log(u) * x / (u - 1) cancels u's rounding error.
  GraphTensor u = x + 1.0;
  GraphTensor r = u.log() * (x / (u - 1.0));
  r = where(u.eq(1.0), x, r);         // |x| below half an ulp of 1 (and +-0.0)
  r = where(x.eq(INFINITY), x, r);    // inf / inf
  return r.cast(result_float(*this));
}

GraphTensor GraphTensor::expm1() const {
  UserOpScope user_op("expm1");
  GraphTensor x = working_float(*this);
  // Kahan: with u = exp(x) rounded, (u - 1) * x / log(u).
  GraphTensor u = x.exp();
  GraphTensor um1 = u - 1.0;
  GraphTensor r = um1 * (x / u.log());
  r = where(u.eq(1.0), x, r);           // tiny x (and +-0.0)
  r = where(um1.eq(-1.0), um1, r);      // exp underflowed: -1 (x = -inf included)
  r = where(u.eq(INFINITY), u, r);      // exp overflowed: inf
  return r.cast(result_float(*this));
}

GraphTensor GraphTensor::log10() const {
  UserOpScope user_op("log10");
  GraphTensor x = working_float(*this);
  return (x.log2() * (std::numbers::ln2 / std::numbers::ln10)).cast(result_float(*this));
}

GraphTensor GraphTensor::trunc() const {
  UserOpScope user_op("trunc");
  if (!is_float(dtype_)) return *this;
  return where(lt(0.0), ceil(), floor());  // ceil(-0.5) is -floor(0.5) = -0.0
}

GraphTensor GraphTensor::fmod(const GraphTensor& b) const {
  UserOpScope user_op("fmod");
  LUMINAL_CHECK(dtype_ != DType::Bool && b.dtype() != DType::Bool, "fmod: not defined for Bool tensors");
  auto [x, y] = broadcast_pair(*this, b);
  if (is_float(x.dtype())) {
    // The floor modulo of two magnitudes is exact (it is fmod there); then x's sign.
    GraphTensor r = magnitude(magnitude(x) % magnitude(y));
    return with_sign_of(r, x);
  }
  // Integers: the floor modulo has the divisor's sign; a nonzero one that disagrees with
  // the dividend's moves by one divisor.
  GraphTensor r = x % y;
  GraphTensor fix = r.ne(0.0).logical_and(x.lt(0.0).ne(y.lt(0.0)));
  return where(fix, r - y, r);
}
GraphTensor GraphTensor::fmod(double b) const {
  UserOpScope user_op("fmod");
  return fmod(scalar_like(*this, b));
}

GraphTensor GraphTensor::atan() const {
  UserOpScope user_op("atan");
  GraphTensor x = working_float(*this);
  return with_sign_of(atan_nonnegative(magnitude(x)), x).cast(result_float(*this));
}

GraphTensor GraphTensor::atan2(const GraphTensor& other) const {
  UserOpScope user_op("atan2");
  auto [y0, x0] = broadcast_pair(to_float(*this), to_float(other));
  DType out = y0.dtype();
  GraphTensor y = working_float(y0), x = working_float(x0);
  GraphTensor ay = magnitude(y), ax = magnitude(x);
  GraphTensor a = atan_nonnegative(ay / ax);  // in [0, pi/2]
  GraphTensor zero = scalar_like(a, 0);
  a = where(ay.eq(0.0).logical_and(ax.eq(0.0)), zero, a);                                  // 0 / 0
  a = where(ay.eq(INFINITY).logical_and(ax.eq(INFINITY)), scalar_like(a, std::numbers::pi / 4), a);  // inf / inf
  a = where(sign_bit(x), std::numbers::pi - a, a);  // left half plane (x = -0.0 included)
  return with_sign_of(a, y).cast(out);
}

GraphTensor GraphTensor::asin() const {
  UserOpScope user_op("asin");
  GraphTensor x = working_float(*this);
  // (1 - x)(1 + x) keeps its accuracy near |x| = 1, where 1 - x*x would cancel.
  return x.atan2(((1.0 - x) * (1.0 + x)).sqrt()).cast(result_float(*this));
}

GraphTensor GraphTensor::acos() const {
  UserOpScope user_op("acos");
  GraphTensor x = working_float(*this);
  return ((1.0 - x) * (1.0 + x)).sqrt().atan2(x).cast(result_float(*this));
}

GraphTensor GraphTensor::sinh() const {
  UserOpScope user_op("sinh");
  GraphTensor x = working_float(*this);
  GraphTensor a = magnitude(x);
  // expm1(a) - expm1(-a) adds two values of opposite sign: no cancellation near 0.
  GraphTensor small = (a.expm1() - (-a).expm1()) * 0.5;
  GraphTensor r = where(a.gt(hyperbolic_cutoff(x.dtype())), half_exp(a), small);
  return with_sign_of(r, x).cast(result_float(*this));
}

GraphTensor GraphTensor::cosh() const {
  UserOpScope user_op("cosh");
  GraphTensor x = working_float(*this);
  GraphTensor a = magnitude(x);
  GraphTensor e = a.exp();
  GraphTensor small = e * 0.5 + e.reciprocal() * 0.5;
  return where(a.gt(hyperbolic_cutoff(x.dtype())), half_exp(a), small).cast(result_float(*this));
}

GraphTensor GraphTensor::asinh() const {
  UserOpScope user_op("asinh");
  GraphTensor x = working_float(*this);
  GraphTensor a = magnitude(x);
  // asinh(a) = log1p(a + a^2 / (1 + sqrt(1 + a^2))); for a > 1e8, log(2a) (a^2 would overflow F32 later).
  GraphTensor a2 = a * a;
  GraphTensor small = (a + a2 / ((a2 + 1.0).sqrt() + 1.0)).log1p();
  GraphTensor r = where(a.gt(1e8), a.log() + std::numbers::ln2, small);
  return with_sign_of(r, x).cast(result_float(*this));
}

GraphTensor GraphTensor::acosh() const {
  UserOpScope user_op("acosh");
  GraphTensor x = working_float(*this);
  // acosh(1 + t) = log1p(t + sqrt(2t + t^2)): accurate near x = 1.
  GraphTensor t = x - 1.0;
  GraphTensor small = (t + (t * 2.0 + t * t).sqrt()).log1p();
  GraphTensor r = where(x.gt(1e8), x.log() + std::numbers::ln2, small);
  return where(x.lt(1.0), scalar_like(r, NAN), r).cast(result_float(*this));
}

GraphTensor GraphTensor::atanh() const {
  UserOpScope user_op("atanh");
  GraphTensor x = working_float(*this);
  GraphTensor a = magnitude(x);
  GraphTensor r = ((a * 2.0) / (1.0 - a)).log1p() * 0.5;  // 1 - a is exact near 1
  return with_sign_of(r, x).cast(result_float(*this));
}

GraphTensor GraphTensor::isnan() const {
  UserOpScope user_op("isnan");
  if (!is_float(dtype_)) return all_false(*this);
  return ne(*this);
}
GraphTensor GraphTensor::isinf() const {
  UserOpScope user_op("isinf");
  if (!is_float(dtype_)) return all_false(*this);
  return abs().eq(INFINITY);
}
GraphTensor GraphTensor::isfinite() const {
  UserOpScope user_op("isfinite");
  if (!is_float(dtype_)) return all_false(*this).logical_not();
  return abs().lt(INFINITY);  // NaN compares false
}

GraphTensor GraphTensor::nan_to_num(double nan, std::optional<double> posinf, std::optional<double> neginf) const {
  UserOpScope user_op("nan_to_num");
  if (!is_float(dtype_)) return *this;
  double hi = largest_finite(dtype_);
  GraphTensor r = where(isnan(), scalar_like(*this, nan), *this);
  r = where(eq(INFINITY), scalar_like(*this, posinf.value_or(hi)), r);
  return where(eq(-INFINITY), scalar_like(*this, neginf.value_or(-hi)), r);
}

// ---- activations ----
GraphTensor GraphTensor::elu(double alpha) const {
  UserOpScope user_op("elu");
  GraphTensor x = to_float(*this);
  return where(x.gt(0.0), x, x.expm1() * alpha);
}
GraphTensor GraphTensor::selu() const {
  UserOpScope user_op("selu");
  constexpr double alpha = 1.6732632423543772848170429916717;
  constexpr double scale = 1.0507009873554804934193349852946;
  GraphTensor x = to_float(*this);
  return where(x.gt(0.0), x * scale, x.expm1() * (alpha * scale));
}
GraphTensor GraphTensor::celu(double alpha) const {
  UserOpScope user_op("celu");
  LUMINAL_CHECK(alpha != 0, "celu: alpha must be nonzero");
  GraphTensor x = to_float(*this);
  return where(x.gt(0.0), x, (x / alpha).expm1() * alpha);
}
GraphTensor GraphTensor::logsigmoid() const {
  UserOpScope user_op("logsigmoid");
  GraphTensor x = working_float(*this);
  // min(x, 0) - log1p(exp(-|x|)): no overflow, accurate in both tails.
  return (x.minimum(0.0) - (-x.abs()).exp().log1p()).cast(result_float(*this));
}
GraphTensor GraphTensor::mish() const {
  UserOpScope user_op("mish");
  GraphTensor x = working_float(*this);
  GraphTensor softplus = x.maximum(0.0) + (-x.abs()).exp().log1p();  // > 0
  // tanh(s) = -expm1(-2s) / (2 + expm1(-2s)): relative accuracy for tiny s (x << 0),
  // where tanh()'s (1 - e) / (1 + e) cancels.
  GraphTensor em = (softplus * -2.0).expm1();
  return (x * (-em / (em + 2.0))).cast(result_float(*this));
}
GraphTensor GraphTensor::hardsigmoid() const {
  UserOpScope user_op("hardsigmoid");
  return (to_float(*this) + 3.0).clamp(0.0, 6.0) / 6.0;
}
GraphTensor GraphTensor::hardswish() const {
  UserOpScope user_op("hardswish");
  GraphTensor x = to_float(*this);
  return x * ((x + 3.0).clamp(0.0, 6.0) / 6.0);  // divided first: x * 6 would overflow near the max
}
GraphTensor GraphTensor::hardtanh(double min_val, double max_val) const {
  UserOpScope user_op("hardtanh");
  LUMINAL_CHECK(min_val <= max_val, "hardtanh: min_val ", min_val, " is above max_val ", max_val);
  return clamp(min_val, max_val);
}
GraphTensor GraphTensor::relu6() const {
  UserOpScope user_op("relu6");
  return clamp(0.0, 6.0);
}
GraphTensor GraphTensor::softsign() const {
  UserOpScope user_op("softsign");
  GraphTensor x = to_float(*this);
  return x / (x.abs() + 1.0);
}
GraphTensor GraphTensor::glu(int axis) const {
  UserOpScope user_op("glu");
  axis = normalize_axis(axis, rank(), "glu");
  auto n = dim(axis).as_constant();
  LUMINAL_CHECK(n.has_value() && *n % 2 == 0, "glu: dimension ", axis, " must have an even static size, got ",
                dim(axis));
  GraphTensor x = to_float(*this);
  GraphTensor a = x.slice(axis, Expression(0), Expression(*n / 2));
  GraphTensor b = x.slice(axis, Expression(*n / 2), Expression(*n));
  return a * b.sigmoid();
}

// ---- logic ----
GraphTensor GraphTensor::logical_xor(const GraphTensor& b) const {
  UserOpScope user_op("logical_xor");
  return cast(DType::Bool).ne(b.cast(DType::Bool));
}

namespace {
int bit_width(DType dt) {
  switch (dt) {
    case DType::I8:
    case DType::U8: return 8;
    case DType::I32: return 32;
    case DType::I64: return 64;
    default: return 1;
  }
}

// a & b for integers of one dtype, bit by bit in I64 (sign-extended, so the low bits are
// the two's complement bits): bit k of v is (v mod 2^(k+1)) >= 2^k (floor modulo).
GraphTensor integer_and(const GraphTensor& a, const GraphTensor& b) {
  const int width = bit_width(a.dtype());
  const bool is_signed = a.dtype() != DType::U8;
  GraphTensor x = a.cast(DType::I64), y = b.cast(DType::I64);
  auto bit = [&](const GraphTensor& v, int k) -> GraphTensor {
    if (k == width - 1 && is_signed) return v.lt(0.0);  // the sign bit
    if (k <= 61) return (v % std::ldexp(1.0, k + 1)).ge(std::ldexp(1.0, k));
    // k = 62 of I64 (2^63 does not fit): v minus its low 62 bits is 0, 2^62, -2^63 or -2^62.
    GraphTensor top = v - v % std::ldexp(1.0, 62);
    return top.eq(std::ldexp(1.0, 62)).logical_or(top.eq(-std::ldexp(1.0, 62)));
  };
  GraphTensor acc = scalar_like(x, 0).expand(x.shape());
  for (int k = 0; k < width; ++k) {
    // 2^63 wraps to -2^63 in I64: the sign bit's weight.
    double weight = k == 63 ? -std::ldexp(1.0, 63) : std::ldexp(1.0, k);
    acc = acc + bit(x, k).logical_and(bit(y, k)).cast(DType::I64) * weight;
  }
  return acc.cast(a.dtype());  // narrowing wraps: the sign bit's weight 2^(w-1) becomes -2^(w-1)
}

std::pair<GraphTensor, GraphTensor> integer_pair(const GraphTensor& a, const GraphTensor& b, const char* op) {
  auto [x, y] = broadcast_pair(a, b);
  LUMINAL_CHECK(!is_float(x.dtype()), op, ": needs integer or Bool tensors, got ", dtype_name(a.dtype()), " and ",
                dtype_name(b.dtype()));
  return {x, y};
}
}  // namespace

GraphTensor GraphTensor::bitwise_and(const GraphTensor& b) const {
  UserOpScope user_op("bitwise_and");
  auto [x, y] = integer_pair(*this, b, "bitwise_and");
  if (x.dtype() == DType::Bool) return x.logical_and(y);
  return integer_and(x, y);
}
GraphTensor GraphTensor::bitwise_or(const GraphTensor& b) const {
  UserOpScope user_op("bitwise_or");
  auto [x, y] = integer_pair(*this, b, "bitwise_or");
  if (x.dtype() == DType::Bool) return x.logical_or(y);
  return x + y - integer_and(x, y);  // exact modulo 2^width
}
GraphTensor GraphTensor::bitwise_xor(const GraphTensor& b) const {
  UserOpScope user_op("bitwise_xor");
  auto [x, y] = integer_pair(*this, b, "bitwise_xor");
  if (x.dtype() == DType::Bool) return x.ne(y);
  return x + y - integer_and(x, y) * 2.0;
}
GraphTensor GraphTensor::bitwise_not() const {
  UserOpScope user_op("bitwise_not");
  LUMINAL_CHECK(!is_float(dtype_), "bitwise_not: needs an integer or Bool tensor, got ", dtype_name(dtype_));
  if (dtype_ == DType::Bool) return logical_not();
  if (dtype_ == DType::U8) return (255.0 - cast(DType::I32)).cast(DType::U8);
  return -*this - 1.0;  // ~x = -x - 1 in two's complement
}

GraphTensor GraphTensor::masked_fill(const GraphTensor& mask, double value) const {
  UserOpScope user_op("masked_fill");
  return masked_fill(mask, graph_->constant(value, dtype_));
}
GraphTensor GraphTensor::masked_fill(const GraphTensor& mask, const GraphTensor& value) const {
  UserOpScope user_op("masked_fill");
  LUMINAL_CHECK(mask.dtype() == DType::Bool, "masked_fill: mask must be Bool, got ", dtype_name(mask.dtype()));
  Shape out = broadcast_shapes(shape(), mask.shape());
  LUMINAL_CHECK(out == shape(), "masked_fill: mask ", to_string(mask.shape()), " does not broadcast to self ",
                to_string(shape()));
  return where(mask, value.cast(dtype_), *this);
}

}  // namespace luminal
