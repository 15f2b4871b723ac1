#include "luminal/host_tensor.hpp"

#include <bit>
#include <cmath>
#include <cstring>

#include "luminal/error.hpp"

namespace luminal {

uint16_t f32_to_bf16_bits(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7FFFu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

float bf16_bits_to_f32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

uint16_t f32_to_f16_bits(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7E00u);
  float a = std::fabs(f);
  if (a >= 65520.0f) return static_cast<uint16_t>(sign | 0x7C00u);
  if (a < 6.103515625e-05f) {  // subnormal or zero: units of 2^-24
    auto m = static_cast<uint32_t>(std::nearbyint(a * 16777216.0f));
    return static_cast<uint16_t>(sign | m);  // m == 1024 carries into the exponent correctly
  }
  int e;
  float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  auto mant = static_cast<uint32_t>(std::nearbyint((m * 2.0f - 1.0f) * 1024.0f));
  uint32_t exp = static_cast<uint32_t>(e - 1 + 15);
  if (mant == 1024) { mant = 0; ++exp; }
  return static_cast<uint16_t>(sign | (exp << 10) | mant);
}

float f16_bits_to_f32(uint16_t h) {
  uint32_t sign = (h & 0x8000u) ? 1 : 0;
  uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
  float v;
  if (exp == 0) v = std::ldexp(static_cast<float>(mant), -24);
  else if (exp == 31) v = mant ? NAN : INFINITY;
  else v = std::ldexp(static_cast<float>(mant + 1024), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

namespace {
template <class T>
T load(const std::vector<std::byte>& b, size_t i) {
  T v;
  std::memcpy(&v, b.data() + i * sizeof(T), sizeof(T));
  return v;
}
template <class T>
void store(std::vector<std::byte>& b, size_t i, T v) {
  std::memcpy(b.data() + i * sizeof(T), &v, sizeof(T));
}
}  // namespace

double HostTensor::get_f64(size_t i) const {
  LUMINAL_ASSERT(i < numel(), "index ", i, " out of ", numel());
  switch (dtype) {
    case DType::F32: return load<float>(bytes, i);
    case DType::F64: return load<double>(bytes, i);
    case DType::F16: return f16_bits_to_f32(load<uint16_t>(bytes, i));
    case DType::BF16: return bf16_bits_to_f32(load<uint16_t>(bytes, i));
    default: return static_cast<double>(get_i64(i));
  }
}

int64_t HostTensor::get_i64(size_t i) const {
  LUMINAL_ASSERT(i < numel(), "index ", i, " out of ", numel());
  switch (dtype) {
    case DType::I32: return load<int32_t>(bytes, i);
    case DType::I64: return load<int64_t>(bytes, i);
    case DType::I8: return load<int8_t>(bytes, i);
    case DType::U8: return load<uint8_t>(bytes, i);
    case DType::Bool: return load<uint8_t>(bytes, i) != 0;
    default: {
      double v = get_f64(i);
      return std::isfinite(v) ? static_cast<int64_t>(v) : 0;  // truncation toward zero
    }
  }
}

void HostTensor::set_f64(size_t i, double v) {
  LUMINAL_ASSERT(i < numel(), "index ", i, " out of ", numel());
  switch (dtype) {
    case DType::F32: store<float>(bytes, i, static_cast<float>(v)); break;
    case DType::F64: store<double>(bytes, i, v); break;
    case DType::F16: store<uint16_t>(bytes, i, f32_to_f16_bits(static_cast<float>(v))); break;
    case DType::BF16: store<uint16_t>(bytes, i, f32_to_bf16_bits(static_cast<float>(v))); break;
    case DType::Bool: store<uint8_t>(bytes, i, v != 0.0 ? 1 : 0); break;
    default: set_i64(i, std::isfinite(v) ? static_cast<int64_t>(v) : 0);
  }
}

void HostTensor::set_i64(size_t i, int64_t v) {
  LUMINAL_ASSERT(i < numel(), "index ", i, " out of ", numel());
  switch (dtype) {
    case DType::I32: store<int32_t>(bytes, i, static_cast<int32_t>(v)); break;
    case DType::I64: store<int64_t>(bytes, i, v); break;
    case DType::I8: store<int8_t>(bytes, i, static_cast<int8_t>(v)); break;
    case DType::U8: store<uint8_t>(bytes, i, static_cast<uint8_t>(v)); break;
    case DType::Bool: store<uint8_t>(bytes, i, v != 0 ? 1 : 0); break;
    default: set_f64(i, static_cast<double>(v));
  }
}

HostTensor HostTensor::zeros(DType dtype, size_t numel, std::vector<int64_t> shape) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.bytes.assign(numel * dtype_bytes(dtype), std::byte{0});
  return t;
}

namespace {
// One dtype switch per call, not per element: a decode step reads 128256 BF16 logits back,
// and the per-element switch (get_f64) cost 0.3 ms of it.
template <class Out>
void convert_floats(const HostTensor& t, Out* out, size_t begin, size_t end) {
  const std::byte* b = t.bytes.data();
  switch (t.dtype) {
    case DType::F32:
      for (size_t i = begin; i < end; ++i) out[i - begin] = static_cast<Out>(load<float>(t.bytes, i));
      return;
    case DType::F64:
      for (size_t i = begin; i < end; ++i) out[i - begin] = static_cast<Out>(load<double>(t.bytes, i));
      return;
    case DType::BF16:
      for (size_t i = begin; i < end; ++i) {
        uint16_t h;
        std::memcpy(&h, b + 2 * i, 2);
        out[i - begin] = static_cast<Out>(bf16_bits_to_f32(h));
      }
      return;
    default:
      for (size_t i = begin; i < end; ++i) out[i - begin] = static_cast<Out>(t.get_f64(i));
  }
}
}  // namespace

void HostTensor::read_f64(size_t begin, size_t end, double* out) const {
  LUMINAL_ASSERT(begin <= end && end <= numel(), "read_f64: [", begin, ", ", end, ") out of ", numel());
  convert_floats(*this, out, begin, end);
}
std::vector<float> HostTensor::to_f32() const {
  std::vector<float> out(numel());
  convert_floats(*this, out.data(), 0, out.size());
  return out;
}
std::vector<double> HostTensor::to_f64() const {
  std::vector<double> out(numel());
  convert_floats(*this, out.data(), 0, out.size());
  return out;
}
std::vector<int32_t> HostTensor::to_i32() const {
  std::vector<int32_t> out(numel());
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int32_t>(get_i64(i));
  return out;
}
std::vector<int64_t> HostTensor::to_i64() const {
  std::vector<int64_t> out(numel());
  for (size_t i = 0; i < out.size(); ++i) out[i] = get_i64(i);
  return out;
}

HostTensor HostTensor::cast(DType to) const {
  if (to == dtype) return *this;
  HostTensor out = zeros(to, numel(), shape);
  bool via_float = is_float(dtype);
  for (size_t i = 0; i < numel(); ++i) {
    if (via_float) out.set_f64(i, get_f64(i));
    else out.set_i64(i, get_i64(i));
  }
  return out;
}

}  // namespace luminal
