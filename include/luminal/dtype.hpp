// Element types. Storage width, float/int classification and PyTorch-style promotion.
#pragma once

#include <cstdint>
#include <string_view>

namespace luminal {

// X-macro: name, bytes, is_float, is_signed, C type name (CUDA spelling), torch name.
#define LUMINAL_DTYPES(X)                                   \
  X(F32, 4, true, true, "float", "float32")                 \
  X(F16, 2, true, true, "half", "float16")                  \
  X(BF16, 2, true, true, "__nv_bfloat16", "bfloat16")       \
  X(F64, 8, true, true, "double", "float64")                \
  X(I32, 4, false, true, "int", "int32")                    \
  X(I64, 8, false, true, "long long", "int64")              \
  X(I8, 1, false, true, "signed char", "int8")              \
  X(U8, 1, false, false, "unsigned char", "uint8")          \
  X(Bool, 1, false, false, "bool", "bool")

enum class DType : uint8_t {
#define LUMINAL_DTYPE_ENUM(name, ...) name,
  LUMINAL_DTYPES(LUMINAL_DTYPE_ENUM)
#undef LUMINAL_DTYPE_ENUM
};

inline constexpr DType kAllDTypes[] = {
#define LUMINAL_DTYPE_LIST(name, ...) DType::name,
    LUMINAL_DTYPES(LUMINAL_DTYPE_LIST)
#undef LUMINAL_DTYPE_LIST
};

size_t dtype_bytes(DType dt);
bool is_float(DType dt);
bool is_signed(DType dt);
// F16 or BF16: the half-precision floats (stored narrow, computed with in F32 where exact).
inline constexpr bool is_half_float(DType dt) { return dt == DType::F16 || dt == DType::BF16; }
std::string_view dtype_name(DType dt);        // "F32"
std::string_view dtype_c_name(DType dt);      // "float"
std::string_view dtype_torch_name(DType dt);  // "float32"
// Parse "F32", "f32", "float32", "BF16", safetensors names ("BF16", "I64", "BOOL", ...).
// Throws luminal::Error naming the string when unknown.
DType parse_dtype(std::string_view name);

// PyTorch's type promotion for two tensors: a float beats an int, a wider type beats a
// narrower one within a category, Bool is the lowest; F16 with BF16 gives F32.
DType promote(DType a, DType b);

// Round a double to what `dt` can hold (float rounding for float types; wraparound for
// integers; 0/1 for Bool). The reference interpreter computes in double/int64 and
// normalises every result with these.
double round_to_float_dtype(double v, DType dt);
int64_t wrap_to_int_dtype(int64_t v, DType dt);

}  // namespace luminal
