// Tensor creation (full, zeros, ones, eye, linspace) and seeded random numbers.
//
// Random numbers are counter based: element i of a tensor is a hash of i and the seed,
// computed with exact integer primitives (I64 Mul/Add wrap, floor Mod), so a seed gives
// bit-identical tensors on every runtime and nothing is stateful. The hash is Widynski's
// "squares" counter-based generator (four rounds of x = x*x + y, then a rotation by 32
// bits), keyed by splitmix64(seed) cut to 53 bits so the key is exact as a constant.
#include <cmath>
#include <numbers>

#include "tensor_internal.hpp"

namespace luminal {
using namespace detail;

namespace {
constexpr double kTwo32 = 4294967296.0;

uint64_t splitmix64(uint64_t s) {
  uint64_t z = s + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The unsigned high 32 bits of x (I64, any sign): (x - low) / 2^32 is exact in F64.
GraphTensor high_bits(const GraphTensor& x) {
  GraphTensor low = x % kTwo32;
  GraphTensor high = ((x - low).cast(DType::F64) * (1.0 / kTwo32)).cast(DType::I64);
  return high % kTwo32;
}
GraphTensor rotate32(const GraphTensor& x) { return high_bits(x) + (x % kTwo32) * kTwo32; }

// 32 random bits (I64 in [0, 2^32)) for each counter value.
GraphTensor squares32(const GraphTensor& counter, uint64_t seed) {
  const double key = static_cast<double>((splitmix64(seed) >> 11) | 1);  // odd, < 2^53: exact
  GraphTensor x = counter * key;
  GraphTensor y = x;
  GraphTensor z = y + key;
  x = rotate32(x * x + y);
  x = rotate32(x * x + z);
  x = rotate32(x * x + y);
  return high_bits(x * x + z);
}

// Uniform [0, 1) with as many random bits as the dtype's significand holds, so rounding
// to the dtype can never reach 1.
GraphTensor bits_to_unit(const GraphTensor& bits, DType dtype) {
  int keep = dtype == DType::F64 ? 32 : dtype == DType::F32 ? 24 : dtype == DType::F16 ? 11 : 8;
  GraphTensor top = bits - bits % std::ldexp(1.0, 32 - keep);
  return (top.cast(DType::F64) * (1.0 / kTwo32)).cast(dtype);
}

void check_float(DType dtype, const char* op) {
  LUMINAL_CHECK(is_float(dtype), op, ": needs a float dtype, got ", dtype_name(dtype));
}
}  // namespace

namespace {
// Counters start + step * i for the elements i of `shape`, shifted by `offset` when given.
GraphTensor counters(Graph& g, const Shape& shape, int64_t step, int64_t start, const GraphTensor* offset) {
  Expression value = Expression::index();
  if (step != 1) value = value * step;
  if (start != 0) value = value + start;
  GraphTensor c = g.iota(value, shape, DType::I64);
  if (!offset) return c;
  LUMINAL_CHECK(offset->rank() == 0 && offset->dtype() == DType::I64,
                "rand/randn: offset must be an I64 scalar tensor, got ", dtype_name(offset->dtype()), " ",
                to_string(offset->shape()));
  return c + offset->expand(shape);
}

GraphTensor uniform(Graph& g, const Shape& shape, uint64_t seed, const GraphTensor* offset, DType dtype) {
  check_float(dtype, "rand");
  return bits_to_unit(squares32(counters(g, shape, 1, 0, offset), seed), dtype);
}

GraphTensor normal(Graph& g, const Shape& shape, uint64_t seed, const GraphTensor* offset, DType dtype) {
  check_float(dtype, "randn");
  // Box-Muller on counters 2i and 2i + 1, in F64: sqrt(-2 ln u1) cos(2 pi u2), u1 in (0, 1].
  GraphTensor u1 = 1.0 - bits_to_unit(squares32(counters(g, shape, 2, 0, offset), seed), DType::F64);
  GraphTensor u2 = bits_to_unit(squares32(counters(g, shape, 2, 1, offset), seed), DType::F64);
  return ((u1.log() * -2.0).sqrt() * (u2 * (2 * std::numbers::pi)).cos()).cast(dtype);
}
}  // namespace

GraphTensor rand(Graph& g, const Shape& shape, uint64_t seed, DType dtype) {
  UserOpScope user_op("rand");
  return uniform(g, shape, seed, nullptr, dtype);
}
GraphTensor randn(Graph& g, const Shape& shape, uint64_t seed, DType dtype) {
  UserOpScope user_op("randn");
  return normal(g, shape, seed, nullptr, dtype);
}
GraphTensor rand(Graph& g, const Shape& shape, uint64_t seed, const GraphTensor& offset, DType dtype) {
  UserOpScope user_op("rand");
  return uniform(g, shape, seed, &offset, dtype);
}
GraphTensor randn(Graph& g, const Shape& shape, uint64_t seed, const GraphTensor& offset, DType dtype) {
  UserOpScope user_op("randn");
  return normal(g, shape, seed, &offset, dtype);
}

GraphTensor full(Graph& g, const Shape& shape, double value, DType dtype) {
  UserOpScope user_op("full");
  return g.constant(value, dtype).expand(shape);
}
GraphTensor zeros(Graph& g, const Shape& shape, DType dtype) {
  UserOpScope user_op("zeros");
  return full(g, shape, 0, dtype);
}
GraphTensor ones(Graph& g, const Shape& shape, DType dtype) {
  UserOpScope user_op("ones");
  return full(g, shape, 1, dtype);
}

GraphTensor eye(Graph& g, const Expression& n, std::optional<Expression> m, DType dtype) {
  UserOpScope user_op("eye");
  Expression cols = m.value_or(n);
  Expression z = Expression::index();
  return g.iota(luminal::eq(z / cols, z % cols), {n, cols}, DType::I32).cast(dtype);
}

GraphTensor linspace(Graph& g, double start, double end, int64_t steps, DType dtype) {
  UserOpScope user_op("linspace");
  LUMINAL_CHECK(steps >= 0, "linspace: steps must be non-negative, got ", steps);
  if (steps == 1) return g.constant(start, dtype).expand({1});
  // As torch: the first half counts up from start, the second half down from end, so
  // both ends are exact.
  double step = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0;
  GraphTensor i = g.arange(steps, DType::I64).cast(DType::F64);
  GraphTensor up = i * step + start;
  GraphTensor down = end - (static_cast<double>(steps - 1) - i) * step;
  GraphTensor r = GraphTensor::where(i.lt(static_cast<double>(steps / 2)), up, down);
  if (!is_float(dtype)) r = r.trunc();  // torch truncates toward zero for integer dtypes
  return r.cast(dtype);
}

GraphTensor GraphTensor::dropout(double p, bool training, uint64_t seed) const {
  UserOpScope user_op("dropout");
  LUMINAL_CHECK(p >= 0 && p <= 1, "dropout: probability must be in [0, 1], got ", p);
  if (!training || p == 0) return *this;
  GraphTensor x = to_float(*this);
  if (p == 1) return scalar_like(x, 0).expand(shape());
  GraphTensor keep = rand(*graph_, shape(), seed, DType::F32).ge(p);
  return where(keep, x * (1.0 / (1.0 - p)), scalar_like(x, 0));
}

}  // namespace luminal
