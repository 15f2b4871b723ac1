#include "luminal/dtype.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cctype>
#include <cstring>
#include <string>

#include "luminal/error.hpp"

namespace luminal {
namespace {
struct DTypeInfo {
  std::string_view name;
  size_t bytes;
  bool is_float, is_signed;
  std::string_view c_name, torch_name;
};
constexpr DTypeInfo kInfo[] = {
#define LUMINAL_DTYPE_INFO(name, bytes, fl, sg, c, torch) {#name, bytes, fl, sg, c, torch},
    LUMINAL_DTYPES(LUMINAL_DTYPE_INFO)
#undef LUMINAL_DTYPE_INFO
};
const DTypeInfo& info(DType dt) { return kInfo[static_cast<size_t>(dt)]; }

// Round-to-nearest-even conversion of an f32 to a 16-bit float format with `mant` mantissa
// bits and `exp_bits` exponent bits, returned widened back to float.
float round_f32_to_bf16(float f) {
  if (std::isnan(f)) return f;
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7FFFu + lsb;
  u &= 0xFFFF0000u;
  return std::bit_cast<float>(u);
}
// IEEE binary16 rounding (nearest-even), including subnormals and overflow to inf.
float round_f32_to_f16(float f) {
  if (std::isnan(f) || std::isinf(f)) return f;
  float a = std::fabs(f);
  if (a >= 65520.0f) return std::copysign(INFINITY, f);  // rounds past the largest half, 65504
  if (a < 6.103515625e-05f) {                              // subnormal: fixed spacing 2^-24
    float q = std::nearbyint(a * 16777216.0f) / 16777216.0f;
    return std::copysign(q, f);
  }
  int e;
  std::frexp(a, &e);                    // a = m * 2^e, m in [0.5, 1)
  float ulp = std::ldexp(1.0f, e - 11); // 10 explicit mantissa bits
  return std::copysign(std::nearbyint(a / ulp) * ulp, f);
}
}  // namespace

size_t dtype_bytes(DType dt) { return info(dt).bytes; }
bool is_float(DType dt) { return info(dt).is_float; }
bool is_signed(DType dt) { return info(dt).is_signed; }
std::string_view dtype_name(DType dt) { return info(dt).name; }
std::string_view dtype_c_name(DType dt) { return info(dt).c_name; }
std::string_view dtype_torch_name(DType dt) { return info(dt).torch_name; }

DType parse_dtype(std::string_view name) {
  std::string upper(name);
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
  for (DType dt : kAllDTypes) {
    std::string torch(dtype_torch_name(dt));
    std::transform(torch.begin(), torch.end(), torch.begin(), [](unsigned char c) { return std::toupper(c); });
    if (upper == dtype_name(dt) || upper == torch) return dt;
  }
  if (upper == "BOOL") return DType::Bool;
  fail("unknown dtype '", name, "' (known: F32 F16 BF16 F64 I32 I64 I8 U8 BOOL)");
}

DType promote(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::Bool) return b;
  if (b == DType::Bool) return a;
  if (is_float(a) != is_float(b)) return is_float(a) ? a : b;
  if (is_float(a)) {
    if ((a == DType::F16 && b == DType::BF16) || (a == DType::BF16 && b == DType::F16)) return DType::F32;
    return dtype_bytes(a) >= dtype_bytes(b) ? a : b;
  }
  // Integers: U8 with I8 promotes to I16 in torch; we have no I16, so I32.
  if ((a == DType::U8 && b == DType::I8) || (a == DType::I8 && b == DType::U8)) return DType::I32;
  return dtype_bytes(a) >= dtype_bytes(b) ? a : b;
}

double round_to_float_dtype(double v, DType dt) {
  switch (dt) {
    case DType::F64: return v;
    case DType::F32: return static_cast<double>(static_cast<float>(v));
    case DType::BF16: return static_cast<double>(round_f32_to_bf16(static_cast<float>(v)));
    case DType::F16: return static_cast<double>(round_f32_to_f16(static_cast<float>(v)));
    default: LUMINAL_ASSERT(false, "round_to_float_dtype on ", dtype_name(dt));
  }
  return v;
}

int64_t wrap_to_int_dtype(int64_t v, DType dt) {
  switch (dt) {
    case DType::I64: return v;
    case DType::I32: return static_cast<int32_t>(static_cast<uint32_t>(v));
    case DType::I8: return static_cast<int8_t>(static_cast<uint8_t>(v));
    case DType::U8: return static_cast<uint8_t>(v);
    case DType::Bool: return v != 0;
    default: LUMINAL_ASSERT(false, "wrap_to_int_dtype on ", dtype_name(dt));
  }
  return v;
}

}  // namespace luminal
