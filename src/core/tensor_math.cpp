// Elementwise functions, each a composition of Exp2, Log2, Sin, Sqrt, Recip and arithmetic.
#include <cmath>
#include <numbers>
#include <vector>

#include "tensor_internal.hpp"

namespace luminal {
using namespace detail;

namespace {
}  // namespace

GraphTensor GraphTensor::exp2() const {
  UserOpScope user_op("exp2");
  return unary(OpKind::Exp2, *this);
}
GraphTensor GraphTensor::log2() const {
  UserOpScope user_op("log2");
  return unary(OpKind::Log2, *this);
}
GraphTensor GraphTensor::sin() const {
  UserOpScope user_op("sin");
  return unary(OpKind::Sin, *this);
}
GraphTensor GraphTensor::sqrt() const {
  UserOpScope user_op("sqrt");
  return unary(OpKind::Sqrt, *this);
}
GraphTensor GraphTensor::reciprocal() const {
  UserOpScope user_op("reciprocal");
  return unary(OpKind::Recip, *this);
}
GraphTensor GraphTensor::log() const {
  UserOpScope user_op("log");
  return log2() * std::numbers::ln2;
}
GraphTensor GraphTensor::rsqrt() const {
  UserOpScope user_op("rsqrt");
  return sqrt().reciprocal();
}

GraphTensor GraphTensor::cos() const {
  UserOpScope user_op("cos");
  // cos(x) = sin(x + pi/2). The shift is done in F64 for every narrower float: rounding
  // x + pi/2 to F32 (let alone F16) costs cos its relative accuracy near its zeros.
  GraphTensor x = to_float(*this);
  if (x.dtype() == DType::F64) return (x + std::numbers::pi / 2).sin();
  return x.cast(DType::F64).cos().cast(x.dtype());
}
GraphTensor GraphTensor::tan() const {
  UserOpScope user_op("tan");
  GraphTensor x = to_float(*this);
  if (x.dtype() != DType::F64) return x.cast(DType::F64).tan().cast(x.dtype());  // one rounding at the end
  return x.sin() / x.cos();
}
GraphTensor GraphTensor::exp() const {
  UserOpScope user_op("exp");
  // exp(x) = 2^(x * log2 e); in F16/BF16 the rounded product would cost exp up to
  // |x| * 2^-8 relative error, so the half types go through F32 as torch does.
  GraphTensor x = to_float(*this);
  if (is_half_float(x.dtype())) return x.cast(DType::F32).exp().cast(x.dtype());
  return (x * std::numbers::log2e).exp2();
}

GraphTensor GraphTensor::floor() const {
  UserOpScope user_op("floor");
  if (!is_float(dtype_)) return *this;
  // Floor modulo keeps the fractional part in [0, 1). Values of magnitude >= 2^52 are
  // already integers in every float dtype, and +-inf % 1 is NaN: pass those (and NaN) through.
  GraphTensor finite = abs().lt(4503599627370496.0);
  GraphTensor r = *this - *this % 1.0;
  r = where(r.eq(0.0), *this * 0.0, r);  // a zero keeps x's sign: floor(-0.0) is -0.0 (x - x mod 1 gives +0.0)
  return where(finite, r, *this);
}
GraphTensor GraphTensor::ceil() const {
  UserOpScope user_op("ceil");
  if (!is_float(dtype_)) return *this;
  return -((-*this).floor());
}
GraphTensor GraphTensor::round() const {
  UserOpScope user_op("round");
  if (!is_float(dtype_)) return *this;
  // |x| >= 2^52 is already an integer (and x + 0.5 could round up); inf/NaN pass through.
  GraphTensor big = abs().lt(4503599627370496.0).logical_not();
  // Half to even: floor(x + 0.5), minus one on exact ties that landed on an odd number.
  GraphTensor r = (*this + 0.5).floor();
  GraphTensor tie = (r - *this).eq(0.5);
  GraphTensor odd = (r % 2.0).eq(1.0);
  r = r - tie.logical_and(odd).cast(dtype_);
  r = where(r.eq(0.0), *this * 0.0, r);  // round(-0.4) and round(-0.0) are -0.0
  return where(big, *this, r);
}

GraphTensor GraphTensor::tanh() const {
  UserOpScope user_op("tanh");
  // tanh(x) = 2*sigmoid(2x) - 1, evaluated on |x| to avoid inf/inf, then re-signed.
  GraphTensor x = to_float(*this);
  GraphTensor e = (x.abs() * (-2.0 * std::numbers::log2e)).exp2();  // exp(-2|x|) in (0, 1]
  GraphTensor t = (1.0 - e) / (1.0 + e);
  t = where(x.lt(0.0), -t, t);
  // Below this, tanh(x) rounds to x in the dtype, and 1 - e would cancel: x itself (which
  // keeps -0.0 too).
  double tiny = x.dtype() == DType::F64 ? 1e-9 : 1e-4;
  return where(x.abs().lt(tiny), x, t);
}

GraphTensor GraphTensor::sigmoid() const {
  UserOpScope user_op("sigmoid");
  GraphTensor x = to_float(*this);
  return ((-x).exp() + 1.0).reciprocal();
}

namespace {
// erf(z) = 2/sqrt(pi) * sum_n (-1)^n z^(2n+1) / (n! (2n+1)), Horner in z^2 (z >= 0).
GraphTensor erf_series(const GraphTensor& z, int terms) {
  std::vector<double> c(terms + 1);
  double fact = 1;
  for (int n = 0; n <= terms; ++n) {
    if (n > 0) fact *= n;
    c[n] = (n % 2 ? -1.0 : 1.0) / (fact * (2 * n + 1));
  }
  GraphTensor z2 = z * z;
  GraphTensor p = z2 * c[terms] + c[terms - 1];
  for (int n = terms - 2; n >= 0; --n) p = p * z2 + c[n];
  return z * p * (2.0 / std::sqrt(std::numbers::pi));
}
}  // namespace

GraphTensor GraphTensor::erf() const {
  UserOpScope user_op("erf");
  GraphTensor x = to_float(*this);
  if (x.dtype() == DType::F64) {
    GraphTensor z = x.abs();
    // Double precision needs more than a fitted approximation (the F32 one below is good
    // to ~1e-7): the Taylor series below 2.5 (38 terms: < 4e-15 relative), and above it
    // 1 - erfc, with erfc from Laplace's continued fraction (30 levels: < 1e-16 there).
    GraphTensor small = erf_series(z, 38);
    GraphTensor f = z;
    for (int k = 30; k >= 1; --k) f = z + (k / 2.0) / f;
    GraphTensor erfc = (-(z * z)).exp() / (f * std::sqrt(std::numbers::pi));
    GraphTensor r = where(z.lt(2.5), small, 1.0 - erfc);
    r = where(x.lt(0.0), -r, r);
    return where(x.eq(0.0), x, r);  // erf(-0.0) is -0.0
  }
  // Two fitted polynomials (minimax by Lawson's iteration against double-precision erf),
  // ~30 primitives in all and no exp: below |x| = 1, erf(x) = x P(x^2) (relative error
  // 4e-8: odd, exact at 0 and -0, accurate for tiny x); above, erf(|x|) = R(|x| - 2.46), R
  // of degree 12 fitting erf on [1, 3.92] (absolute error 3e-8; evaluated in F32, 9e-8 on
  // every float there, fused or not). Past 3.92, erf rounds to 1 in F32 and R(3.92) is
  // exactly 1, so |x| is clamped there (inf gives +-1; the clamp keeps NaN). The result is
  // within 1e-7 of erf everywhere. (The previous form, 1 - 2^Q(|x|), cost an exp2 and a
  // degree-7 polynomial on that side: about twice the operations.)
  // F16/BF16 compute in F32, as exp does.
  if (is_half_float(x.dtype())) return x.cast(DType::F32).erf().cast(x.dtype());
  GraphTensor w = x * x;
  const double p[] = {1.1283791224975583, -0.37612326190138823, 0.11280180114720897, -0.026711311050005154,
                      0.004917550876076912, -0.0005631419253374903};
  GraphTensor small = w * p[5] + p[4];
  for (int i = 3; i >= 0; --i) small = small * w + p[i];
  small = x * small;
  const double r[] = {0.9994966732223133,     0.0026561933969210094,  -0.006535763423398497,  0.00983299569196927,
                      -0.009904826462795974,  0.006797654217578185,   -0.002963511062180065,  0.00046216698836048327,
                      0.0003911329085899489,  -0.00030167538900371547, 5.166613286489369e-05, 2.5420457656495556e-05,
                      -9.124663055188557e-06};
  GraphTensor negative = x.lt(0.0);
  GraphTensor z = where(negative, -x, x);  // |x| (NaN stays NaN); a select, where sqrt(w) cost a slow sqrt
  z = where(z.gt(3.92), scalar_like(z, 3.92), z);
  GraphTensor t = z - 2.46;
  GraphTensor large = t * r[12] + r[11];
  for (int i = 10; i >= 0; --i) large = large * t + r[i];
  large = where(negative, -large, large);
  return where(w.lt(1.0), small, large);
}

GraphTensor GraphTensor::relu() const {
  UserOpScope user_op("relu"); return where(lt(0.0), scalar_like(*this, 0), *this); }  // NaN stays NaN
GraphTensor GraphTensor::leaky_relu(double slope) const {
  UserOpScope user_op("leaky_relu");
  return where(gt(0.0), *this, *this * slope);
}
GraphTensor GraphTensor::gelu() const {
  UserOpScope user_op("gelu");
  GraphTensor x = to_float(*this);
  return x * 0.5 * ((x * (1.0 / std::numbers::sqrt2)).erf() + 1.0);
}
GraphTensor GraphTensor::gelu_tanh() const {
  UserOpScope user_op("gelu_tanh");
  GraphTensor x = to_float(*this);
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return x * 0.5 * (((x + x * x * x * 0.044715) * k).tanh() + 1.0);  // torch's form: -0.0 where 1 + tanh is 0
}
GraphTensor GraphTensor::silu() const {
  UserOpScope user_op("silu");
  return to_float(*this) * sigmoid();
}
GraphTensor GraphTensor::softplus(double beta, double threshold) const {
  UserOpScope user_op("softplus");
  GraphTensor x = to_float(*this);
  GraphTensor bx = x * beta;
  // log(1 + exp(bx)) / beta, linear above the threshold as in PyTorch; written as
  // max(bx, 0) + log(1 + exp(-|bx|)) so exp never overflows (F16 overflows at exp(11.1)).
  GraphTensor soft = (bx.maximum(0.0) + ((-bx.abs()).exp() + 1.0).log()) / beta;
  return where(bx.gt(threshold), x, soft);
}

}  // namespace luminal
