// Rendering a Kernel as C++ or CUDA C: one emitter, two dialect tables.
//
// Everything that is the same in both languages (statement rendering, value types,
// op spellings, numeric helpers) lives in the base; a Dialect holds the spellings that
// differ (qualifiers, bit casts, infinities, the entry point and loop headers).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "luminal/error.hpp"
#include "luminal/kernel/kernel.hpp"

// GCC 12 reports -Wrestrict false positives on "literal" + std::string once enough of this
// file is inlined (GCC bug 105329); which line it names depends on inlining decisions.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

namespace luminal::kernel {
namespace {

// exp2 and log2 of F32 values, evaluated in float by both dialects (two ulp; 16 lanes per
// AVX-512 vector on the CPU; on the GPU the double-precision versions made a prefill's causal
// softmax, SwiGLU and RoPE several times their bytes' time: FP64 runs at half FP32's rate and
// needs twice the registers).
constexpr std::string_view kExpLog2Float = R"(/* exp2 and log2 of a float, evaluated in float by branch-free polynomials the compiler
   vectorises (16 lanes with AVX-512; libm's exp2f/log2f are calls, one element at a time).
   Both are within 2 ulp of the exact value for every float, subnormal results included
   (CpuTranscendentals tests sweep the bit patterns against double-precision exp2/log2).
   Special values as IEEE: NaN -> NaN; exp2: -inf -> +0, +inf and overflow -> +inf,
   underflow -> a subnormal or 0; log2: +-0 -> -inf, x < 0 -> NaN, +inf -> +inf. */
#define LM_EXP2_SHIFTER 12582912.0f /* 1.5 * 2^23: adding it to |x| < 2^22 rounds x to an integer */
/* 2^f for f in [-0.5, 0.5]: degree-6 minimax polynomial (relative error 2e-9). */
LM_FN float lm_exp2f_frac(float f) {
  float p = 1.534580806037411e-4f;
  p = LM_FMAF(p, f, 1.3399930903688073e-3f);
  p = LM_FMAF(p, f, 9.618489071726799e-3f);
  p = LM_FMAF(p, f, 5.550328642129898e-2f);
  p = LM_FMAF(p, f, 0.24022646248340607f);
  p = LM_FMAF(p, f, 0.6931471824645996f);
  return LM_FMAF(p, f, 1.0f);
}
LM_FN float lm_exp2f(float x) {
#if defined(__CUDA_ARCH__)
  /* CUDA's exp2f: within 2 ulp over the whole range (CUDA Math API), subnormal results
     included, a few instructions around the MUFU.EX2 unit where the polynomial is ~20. */
  return exp2f(x);
#else
  /* x clamped to [-151, 129] (2^-151 rounds to 0 and 2^129 to inf) by integer minima of its
     bits, one instruction each: as unsigned, every x below -151 (-inf included) lies above
     -151's bits and every positive x below them; as signed, every x above 129 lies above
     129's bits and every negative x below them. Float selects against constants cost GCC
     ten mask operations (it pushes each select into the arithmetic after it). The minima
     also turn a NaN into a bound, so a NaN input is returned at the end (a masked multiply). */
  const float input = x;
  const unsigned low = LM_F2U(x) < 0xc3170000u ? LM_F2U(x) : 0xc3170000u; /* -151 */
  x = LM_U2F((unsigned)((int)low < 0x43010000 ? (int)low : 0x43010000));  /* 129 */
  const float t = x + LM_EXP2_SHIFTER;
  const float p = lm_exp2f_frac(x - (t - LM_EXP2_SHIFTER)); /* the fraction in [-0.5, 0.5], exact */
  /* 2^n as two normal factors 2^(n/2), so the only rounding of a subnormal or overflowing
     result is the last product's (n >> 1 is floor(n/2), one shift where n / 2 needs three
     instructions; n1, n2 in [-76, 65], so both factors and p * 2^n1 are normal). Their
     biased exponents come from m = n + 254 straight from t's bits: m >> 1 = n1 + 127 and
     m - (m >> 1) = n2 + 127 (m in [103, 383]), two additions fewer than biasing each. */
  const int m = (int)(LM_F2U(t) - (LM_F2U(LM_EXP2_SHIFTER) - 254u));
  const int e1 = m >> 1, e2 = m - e1;
  const float r = p * LM_U2F((unsigned)e1 << 23) * LM_U2F((unsigned)e2 << 23);
  return input != input ? input : r;
#endif
}
/* exp2 where a NaN result is taken back (a sum over it is computed again with lm_exp2f:
   Emitter::blocked_sum): lm_exp2f's bits for |x| < 126 and for x <= -151 (+0: -inf, a
   masked score), NaN for every other x (NaN, |x| >= 126 above -151). For |x| < 126, n is
   in [-126, 126] and 2^n is one normal factor built from t's bits ((n + 127) << 23); p *
   2^n (p in [0.7, 1.42]) is then normal and exact, as lm_exp2f's two factors are. 17
   vector operations where lm_exp2f takes 20 and no integer clamps: (64, 4096) softmax
   0.466 -> 0.410 ms on one Zen 1 core. NaN for every |x| >= 126 was faster (0.373) but
   sends each causally masked row to the fallback. */
LM_FN float lm_exp2f_or_nan(float x) {
  const float t = x + LM_EXP2_SHIFTER;
  const float p = lm_exp2f_frac(x - (t - LM_EXP2_SHIFTER));
  const float r = p * LM_U2F((LM_F2U(t) << 23) + ((127u - LM_F2U(LM_EXP2_SHIFTER)) << 23));
  const float in_range = fabsf(x) < 126.0f ? r : LM_NAN_F;
  return x <= -151.0f ? 0.0f : in_range;
}
/* exp2 of an argument already known to lie in (-126, 126) (Emitter::plan_fast_exp2s: a
   sum's row whose arguments' bounds were checked before its loop): lm_exp2f_or_nan without
   its range checks, so the same bits there (12 vector operations instead of 17). NaN
   still gives NaN, which sends the sum to its exact fallback. */
LM_FN float lm_exp2f_in_range(float x) {
  const float t = x + LM_EXP2_SHIFTER;
  const float p = lm_exp2f_frac(x - (t - LM_EXP2_SHIFTER));
  return p * LM_U2F((LM_F2U(t) << 23) + ((127u - LM_F2U(LM_EXP2_SHIFTER)) << 23));
}
LM_FN float lm_log2f(float x) {
  const bool tiny = x < 1.17549435e-38f; /* subnormals are scaled by 2^23 first */
  const unsigned u = LM_F2U(tiny ? x * 8388608.0f : x);
  int e = (int)((u >> 23) & 0xffu) - (tiny ? 150 : 127);
  float m = LM_U2F((u & 0x007fffffu) | 0x3f800000u); /* [1, 2) */
  const bool high = m > 1.41421356f;
  m = high ? m * 0.5f : m;
  e = high ? e + 1 : e;
  /* log2(m) = s P(s^2), s = (m - 1) / (m + 1), |s| < 0.172: degree 3 in s^2 (relative 7e-10). */
  const float s = (m - 1.0f) / (m + 1.0f), s2 = s * s;
  float p = 0.4317359164254919f;
  p = LM_FMAF(p, s2, 0.5767143829728889f);
  p = LM_FMAF(p, s2, 0.9617988476431686f);
  /* 2/ln 2 as a float plus its rounding error, so the leading term is rounded once. */
  const float lg = LM_FMAF(s, 2.88539004325866699f, s * LM_FMAF(s2, p, 3.8519260e-08f));
  float r = (float)e + lg;
  r = x == 0.0f ? -LM_INF_F : r;
  r = x < 0.0f ? LM_NAN_F : r;
  r = x == LM_INF_F ? x : r;
  r = x != x ? x : r;
  return r;
}
)";

struct Dialect {
  std::string_view includes;   // before anything else
  std::string_view fn;         // qualifier of helper functions
  std::string_view f2u, u2f;   // float <-> uint32 bit casts (function names)
  std::string_view d2u, u2d;   // double <-> uint64 bit casts
  std::string_view fma;        // #define LM_FMA: a fused multiply-add where the hardware has one
  std::string_view inf_f, nan_f, inf_d, nan_d;
  std::string_view report;     // lm_report: the first error claims the record (docs/KERNEL_IR.md)
  std::string_view warp_helpers;  // lane reductions, invariant-divisor helpers (CUDA only)
  std::string_view sin_f32;    // lm_sin of a float
  bool lanes = false;          // a warp shares one row: top-level reductions and cols stride by 32
  bool cuda = false;
};

constexpr Dialect kCpp{
    "#include <math.h>\n#include <stdint.h>\n",
    "static inline",
    "lm_f2u_", "lm_u2f_",
    "lm_d2u_", "lm_u2d_",
    "#ifdef __FMA__\n#define LM_FMA(a, b, c) __builtin_fma(a, b, c)\n#define LM_FMAF(a, b, c) __builtin_fmaf(a, b, c)\n"
    "#else\n#define LM_FMA(a, b, c) ((a) * (b) + (c))\n#define LM_FMAF(a, b, c) ((a) * (b) + (c))\n#endif\n",
    "__builtin_inff()", "__builtin_nanf(\"\")", "__builtin_inf()", "__builtin_nan(\"\")",
    R"(LM_FN bool lm_claim(int* err, int code) {
  int expected = 0;
  return __atomic_compare_exchange_n(err, &expected, code, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}
)",
    "",
    /* sin of a float through double, then rounded: the correctly rounded result the
       reference gives (libm's sinf is a call as well, and not correctly rounded everywhere). */
    "LM_FN float lm_sin(float a) { return (float)sin((double)a); }\n",
    false,
    false,
};

constexpr Dialect kCuda{
    "",
    "static __device__ __forceinline__",
    "__float_as_uint", "__uint_as_float",
    "(unsigned long long)__double_as_longlong", "lm_u2d_",
    "#define LM_FMA(a, b, c) fma(a, b, c)\n#define LM_FMAF(a, b, c) fmaf(a, b, c)\n",
    "__int_as_float(0x7f800000)", "__int_as_float(0x7fffffff)", "__longlong_as_double(0x7ff0000000000000LL)",
    "__longlong_as_double(0x7fffffffffffffffLL)",
    R"(LM_FN bool lm_claim(int* err, int code) { return atomicCAS(err, 0, code) == 0; }
)",
    R"(/* A 16-byte copy between a buffer and a thread's registers (vectorized elementwise
   kernels): one 128-bit load or store on the device. */
#if defined(__CUDA_ARCH__)
#define LM_COPY16(dst, src) (*(uint4*)(dst) = *(const uint4*)(src))
#else
#define LM_COPY16(dst, src) __builtin_memcpy((dst), (src), 16)
#endif
/* Programmatic dependent launch (sm_90+): the runtime may start this kernel while the
   previous one in the stream finishes; it waits here, before reading anything, until that
   kernel has completed and its writes are visible, then lets the next kernel launch (it
   waits in turn for this one to complete). A no-op for an ordinary launch. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define LM_GRID_ENTER() asm volatile("griddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;" ::: "memory")
#else
#define LM_GRID_ENTER()
#endif
/* Division by an invariant divisor (Kernel: invariant_divisors): the launch passes the
   divisor d and m = ceil(2^62 / d) (0 when d is outside [1, 2^31]); for 0 <= a < 2^31,
   floor(a / d) = floor(a m / 2^62) = the high word of (4a) m, a few multiply-adds where a
   64-bit division is a subroutine of dozens of instructions. Anything else divides. */
struct lm_divisor { long long d; unsigned long long m; };
LM_FN unsigned long long lm_umulhi(unsigned long long a, unsigned long long b) {
#if defined(__CUDA_ARCH__)
  return __umul64hi(a, b);
#else
  return (unsigned long long)(((unsigned __int128)a * b) >> 64);
#endif
}
LM_FN long long lm_floordiv_inv(long long a, lm_divisor v) {
  if (v.m != 0ULL && (unsigned long long)a < 0x80000000ULL) return (long long)lm_umulhi((unsigned long long)a << 2, v.m);
  return lm_floordiv(a, v.d);
}
LM_FN long long lm_floormod_inv(long long a, lm_divisor v) {
  if (v.m != 0ULL && (unsigned long long)a < 0x80000000ULL)
    return a - (long long)lm_umulhi((unsigned long long)a << 2, v.m) * v.d;
  return lm_floormod(a, v.d);
}
LM_FN double lm_lane_sum(double a) { for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o); return a; }
LM_FN long long lm_lane_sum(long long a) { for (int o = 16; o > 0; o >>= 1) a = (long long)((unsigned long long)a + (unsigned long long)__shfl_xor_sync(0xffffffffu, a, o)); return a; }
LM_FN float lm_lane_max(float a) { for (int o = 16; o > 0; o >>= 1) a = lm_rmax(a, __shfl_xor_sync(0xffffffffu, a, o)); return a; }
LM_FN double lm_lane_max(double a) { for (int o = 16; o > 0; o >>= 1) a = lm_rmax(a, __shfl_xor_sync(0xffffffffu, a, o)); return a; }
LM_FN long long lm_lane_max(long long a) { for (int o = 16; o > 0; o >>= 1) a = lm_rmax(a, __shfl_xor_sync(0xffffffffu, a, o)); return a; }
LM_FN double lm_add_(double a, double b) { return a + b; }
LM_FN long long lm_add_(long long a, long long b) { return (long long)((unsigned long long)a + (unsigned long long)b); }
/* A block's reduction (block-per-row kernels): lanes, then the warps' results in order. */
#define LM_BLOCK_REDUCE(NAME, LANE, T, COMBINE) \
  LM_FN T NAME(T a) { \
    __shared__ T lm_part[32]; \
    a = LANE(a); \
    if ((threadIdx.x & 31u) == 0u) lm_part[threadIdx.x >> 5] = a; \
    __syncthreads(); \
    T r = lm_part[0]; \
    for (unsigned w = 1; w < ((blockDim.x + 31u) >> 5); ++w) r = COMBINE(r, lm_part[w]); \
    __syncthreads(); \
    return r; \
  }
LM_BLOCK_REDUCE(lm_block_sum, lm_lane_sum, double, lm_add_)
LM_BLOCK_REDUCE(lm_block_sum, lm_lane_sum, long long, lm_add_)
LM_BLOCK_REDUCE(lm_block_max, lm_lane_max, float, lm_rmax)
LM_BLOCK_REDUCE(lm_block_max, lm_lane_max, double, lm_rmax)
LM_BLOCK_REDUCE(lm_block_max, lm_lane_max, long long, lm_rmax)
)",
    /* CUDA's sinf: within 2 ulp over the whole range (a slow path reduces |a| > 105615);
       sin in double took RoPE's prefill kernels several times their bytes' time. */
    "LM_FN float lm_sin(float a) { return sinf(a); }\n",
    true,
    true,
};

// Helpers shared by both dialects (LM_FN, LM_F2U, LM_U2F, LM_INF* come from the dialect).
constexpr std::string_view kHelpers = R"(/* Errors: the first claims the record: code, bound site, flat index, flat position. */
LM_FN void lm_report(int* err, int code, int site, long long index, long long position) {
  if (!lm_claim(err, code)) return;
  err[1] = site;
  err[2] = (int)(unsigned)(unsigned long long)index;
  err[3] = (int)(unsigned)((unsigned long long)index >> 32);
  err[4] = (int)(unsigned)(unsigned long long)position;
  err[5] = (int)(unsigned)((unsigned long long)position >> 32);
}
/* 16-bit floats: storage bits <-> float, round to nearest even. On the GPU one cvt
   instruction each (the same bits for every number; the NaN keeps our bits): a BF16
   SwiGLU rounds six times per element, ~6 integer operations each in software. */
LM_FN float lm_f16_to_f32(unsigned short h) {
  unsigned sign = (unsigned)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
#if defined(__CUDA_ARCH__)
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return exp == 31 ? LM_U2F(sign | 0x7f800000u | (mant << 13)) : f;
#else
  if (exp == 31) return LM_U2F(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) { float v = (float)mant * 5.9604644775390625e-8f; return sign ? -v : v; }
  return LM_U2F(sign | ((exp + 112u) << 23) | (mant << 13));
#endif
}
/* On the device a NaN's sign is kept (cvt gives one positive NaN) by a select after the
   conversion, not a branch before it: a branch per conversion split an elementwise kernel
   into dozens of blocks and cost case 2's chain 22% of its time (docs/LESSONS.md). */
#if defined(__CUDA_ARCH__)
/* One cvt to 16 bits, round to nearest even (a NaN becomes the positive canonical one). */
LM_FN unsigned short lm_cvt_f16(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
LM_FN unsigned short lm_cvt_bf16(float f) {
  unsigned short h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
#endif
LM_FN unsigned short lm_f32_to_f16(float f) {
  unsigned u = LM_F2U(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
#if defined(__CUDA_ARCH__)
  const unsigned short h = lm_cvt_f16(f);
  return a > 0x7f800000u ? (unsigned short)(sign | 0x7e00u) : h;
#else
  if (a > 0x7f800000u) return (unsigned short)(sign | 0x7e00u);
  if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);
  if (a < 0x38800000u) return (unsigned short)(sign | (unsigned)rintf(LM_U2F(a) * 16777216.0f));
  unsigned r = a - 0x38000000u;
  return (unsigned short)(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
#endif
}
LM_FN float lm_bf16_to_f32(unsigned short h) { return LM_U2F((unsigned)h << 16); }
LM_FN unsigned short lm_f32_to_bf16(float f) {
  unsigned u = LM_F2U(f);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned short h = lm_cvt_bf16(f);
  return (u & 0x7fffffffu) > 0x7f800000u ? (unsigned short)((u >> 16) | 0x40u) : h;
#else
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
#endif
}
/* Rounding a float to 16 bits and back (a graph's F16/BF16 steps): on the device one cvt
   each way, a NaN becoming the positive one. No arithmetic step observes a NaN's sign
   (there is no copysign among the primitives), so only stores keep it (lm_f32_to_*). */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
LM_FN float lm_round_f16(float x) { return lm_f16_to_f32(lm_cvt_f16(x)); }
LM_FN float lm_round_bf16(float x) { return lm_bf16_to_f32(lm_cvt_bf16(x)); }
#else
LM_FN float lm_round_f16(float x) { return lm_f16_to_f32(lm_f32_to_f16(x)); }
LM_FN float lm_round_bf16(float x) { return lm_bf16_to_f32(lm_f32_to_bf16(x)); }
#endif
/* Floor modulo (sign of the divisor); integer modulo by zero reports an error and gives 0. */
LM_FN float lm_mod(float a, float b) { float r = fmodf(a, b); if (r != 0 && ((r < 0) != (b < 0))) r += b; return r; }
LM_FN double lm_mod(double a, double b) { double r = fmod(a, b); if (r != 0 && ((r < 0) != (b < 0))) r += b; return r; }
LM_FN long long lm_imod(long long a, long long b, int* err, bool active) {
  if (b == 0) { if (active) lm_report(err, 1, -1, 0, 0); return 0; }
  if (b == -1) return 0;
  long long r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}
LM_FN float lm_recip(float a) { return 1.0f / a; }
LM_FN double lm_sin(double a) { return sin(a); }
LM_FN double lm_recip(double a) { return 1.0 / a; }
/* Max that propagates NaN. */
LM_FN float lm_rmax(float acc, float v) { return acc != acc ? acc : ((v != v || v > acc) ? v : acc); }
LM_FN double lm_rmax(double acc, double v) { return acc != acc ? acc : ((v != v || v > acc) ? v : acc); }
LM_FN long long lm_rmax(long long acc, long long v) { return v > acc ? v : acc; }
/* float -> integer: truncate; NaN/inf -> 0; out of int64 range -> INT64_MIN (as x86). */
LM_FN long long lm_f2i(double v) {
  if (v != v || v == LM_INF_D || v == -LM_INF_D) return 0;
  if (v >= 9223372036854775808.0 || v < -9223372036854775808.0) return -9223372036854775807LL - 1LL;
  return (long long)v;
}
LM_FN long long lm_wrap_add(long long a, long long b) { return (long long)((unsigned long long)a + (unsigned long long)b); }
LM_FN long long lm_wrap_mul(long long a, long long b) { return (long long)((unsigned long long)a * (unsigned long long)b); }
)";

// Compute type: the C type a value of `dt` lives in between statements.
std::string_view value_type(DType dt) {
  switch (dt) {
    case DType::F32:
    case DType::F16:
    case DType::BF16: return "float";
    case DType::F64: return "double";
    case DType::I32: return "int";
    case DType::I64: return "long long";
    case DType::I8: return "signed char";
    case DType::U8: return "unsigned char";
    case DType::Bool: return "bool";
  }
  return "?";
}
// Storage type: the element type of a buffer.
std::string_view storage_type(DType dt) {
  if (dt == DType::F16 || dt == DType::BF16) return "unsigned short";
  if (dt == DType::Bool) return "unsigned char";
  return value_type(dt);
}
// Reduction accumulator type: sums of floats accumulate in double, integers in int64.
std::string_view accumulator_type(OpKind op, DType dt) {
  if (!is_float(dt)) return "long long";
  return op == OpKind::SumReduce ? "double" : value_type(dt);
}
// A load of the element's own index, unguarded, of a type a 16-byte copy holds whole
// elements of: vectorized elementwise kernels read these into registers.
bool is_flat_load(const Stmt& s) {
  return s.kind == StmtKind::Load && s.guard == Expression(1) && s.index == Expression::var(kRowVar) &&
         dtype_bytes(s.dtype) >= 2 && dtype_bytes(s.dtype) <= 8;
}
void collect_flat_loads(const std::vector<Stmt>& body, std::set<int>& out) {
  for (const auto& s : body) {
    if (is_flat_load(s)) out.insert(s.buffer);
    collect_flat_loads(s.body, out);
  }
}
std::set<int> flat_loads(const Kernel& k) {
  std::set<int> out;
  for (const auto& p : k.phases) {
    collect_flat_loads(p.row_body, out);
    collect_flat_loads(p.col_body, out);
  }
  return out;
}
bool contains_kind(const std::vector<Stmt>& stmts, StmtKind kind) {
  for (const auto& s : stmts)
    if (s.kind == kind || contains_kind(s.body, kind)) return true;
  return false;
}
bool contains_reduce(const std::vector<Stmt>& stmts) { return contains_kind(stmts, StmtKind::Reduce); }

// ---- chunks: a CUDA thread takes several consecutive iterations of a loop at once ----
// A load or store is contiguous over chunks of `width` iterations of `var` when
// index(var = width*q + k) = index(var = width*q) + k for 0 <= k < width: a chunk's
// elements are then one run of memory, read or written with 16-byte copies where the run
// is aligned. Checked symbolically (a transposed read, RoPE's `(col % 128)`, folds the
// same way: fold_loop_extent), so a rewrite of the view cannot make it wrong silently.
bool contiguous_over(const Expression& index, const std::string& var, int width) {
  if (!index.depends_on(var)) return false;
  const Expression k = Expression::var("$lm_k");
  const Expression at = fold_loop_extent(index.substitute(var, Expression::var("$lm_q") * width + k).simplify(), "$lm_k",
                                         width);
  return (at - at.substitute("$lm_k", Expression(0))).simplify() == k;
}
// The constant term of a canonical sum (0 when there is none).
int64_t constant_term(const Expression& e) {
  if (const auto c = e.as_constant()) return *c;
  if (e.kind() == ExprKind::Add)
    for (const auto& t : e.children())
      if (const auto c = t.as_constant()) return *c;
  return 0;
}
// Is the folded condition `e` (in $lm_q and $lm_k, 0 <= $lm_k < width) the same for every
// $lm_k? A comparison whose two sides differ by D + $lm_k or D - $lm_k, with D a multiple of
// the width plus a constant c: D - k >= 1 holds for all k or none when c is a multiple of the
// width, D + k >= 1 when c - 1 is (RoPE's halves of a head: `(col % 128) < 64` over chunks of 8).
bool uniform_over_chunk_folded(const Expression& e, int width) {
  if (!e.depends_on("$lm_k")) return true;
  const auto kids = e.children();
  switch (e.kind()) {
    case ExprKind::And:
    case ExprKind::Or:
    case ExprKind::Not:
      return std::all_of(kids.begin(), kids.end(), [&](const Expression& c) { return uniform_over_chunk_folded(c, width); });
    case ExprKind::Lt: {
      const Expression k = Expression::var("$lm_k");
      const Expression diff = (kids[1] - kids[0]).simplify();  // the condition is diff >= 1
      const Expression d = diff.substitute("$lm_k", Expression(0)).simplify();
      const Expression slope = (diff - d).simplify();
      const bool falling = slope == (k * -1).simplify();
      if (!falling && !(slope == k)) return false;
      const int64_t c = constant_term(d);
      const Expression rest = (d - c).simplify();
      if (!((rest / width * width).simplify() == rest)) return false;
      const int64_t residue = ((falling ? c : c - 1) % width + width) % width;
      return residue == 0;
    }
    default: return false;
  }
}
bool uniform_over_chunk(const Expression& cond, const std::string& var, int width) {
  if (!cond.depends_on(var)) return true;
  const Expression at = fold_loop_extent(
      cond.substitute(var, Expression::var("$lm_q") * width + Expression::var("$lm_k")).simplify(), "$lm_k", width);
  return uniform_over_chunk_folded(at, width);
}
// A chunk's first element is computed once per chunk, so its index may use only the loop
// variable, the row and the dims (not a value the loop body defines).
bool chunk_addressable(const Expression& index, const std::string& var) {
  for (const auto& v : index.variables())
    if (!v.empty() && v[0] == '$' && v != var && v != kRowVar) return false;
  return true;
}
// The loads and the store directly in `body` (not in a nested reduction) that a chunk of
// `width` iterations of `var` copies 16 bytes at a time: whole elements of a 16-byte copy,
// contiguous over the chunk, unguarded or guarded alike for the whole chunk (the chunk is
// then read only where its guard holds). width 0: every candidate of any width.
std::vector<const Stmt*> chunk_accesses(const std::vector<Stmt>& body, const std::string& var, int width) {
  std::vector<const Stmt*> out;
  for (const auto& s : body) {
    if (s.kind != StmtKind::Load && s.kind != StmtKind::Store) continue;
    const size_t bytes = dtype_bytes(s.dtype);
    if (bytes < 2 || bytes > 8 || !chunk_addressable(s.index, var)) continue;
    const bool guarded = s.kind == StmtKind::Load && !(s.guard == Expression(1));
    if (guarded && !chunk_addressable(s.guard, var)) continue;
    const int w = width > 0 ? width : static_cast<int>(16 / bytes);
    if ((static_cast<size_t>(w) * bytes) % 16 != 0 || !contiguous_over(s.index, var, w)) continue;
    if (guarded && !uniform_over_chunk(s.guard, var, w)) continue;
    out.push_back(&s);
  }
  return out;
}
bool lane_geometry(const Kernel& k) { return k.geometry == Geometry::WarpPerRow || k.geometry == Geometry::BlockPerRow; }
// The loops a row's threads share (CUDA, a warp or a block per row): its top-level
// reductions and its columns, as (variable, extent, body).
struct LaneLoop {
  std::string var;
  Expression extent;
  const std::vector<Stmt>* body;
};
std::vector<LaneLoop> lane_loops(const Phase& p) {
  std::vector<LaneLoop> out;
  for (const auto& s : p.row_body)
    if (s.kind == StmtKind::Reduce) out.push_back({"$r" + std::to_string(s.loop), s.index, &s.body});
  if (!(p.cols == Expression(1))) out.push_back({std::string(kColVar), p.cols, &p.col_body});
  return out;
}
// How many consecutive iterations a thread takes at once in each of the row's shared
// loops: 16 bytes of the smallest element any of them can copy contiguously, or 1 when none
// can. One width for the whole phase, so that a thread owns the same columns in every loop
// (a row's scratch: the reductions stash, the columns read back).
int row_chunk_width(const Kernel& k, const Phase& p) {
  if (!lane_geometry(k)) return 1;
  size_t smallest = 0;
  for (const auto& loop : lane_loops(p))
    for (const Stmt* s : chunk_accesses(*loop.body, loop.var, 0))
      smallest = smallest == 0 ? dtype_bytes(s->dtype) : std::min(smallest, dtype_bytes(s->dtype));
  if (smallest == 0) return 1;
  const int width = static_cast<int>(16 / smallest);
  for (const auto& loop : lane_loops(p))
    if (!chunk_accesses(*loop.body, loop.var, width).empty()) return width;
  return 1;
}

// Float spellings of the primitive ops: a function name, or an infix operator.
struct Spelling {
  OpKind op;
  std::string_view f32, f64;
  bool infix;
};
constexpr Spelling kFloatOps[] = {
    {OpKind::Exp2, "lm_exp2f", "exp2", false}, {OpKind::Log2, "lm_log2f", "log2", false},
    {OpKind::Sin, "lm_sin", "lm_sin", false},    {OpKind::Sqrt, "sqrtf", "sqrt", false},
    {OpKind::Recip, "lm_recip", "lm_recip", false}, {OpKind::Mod, "lm_mod", "lm_mod", false},
    {OpKind::Add, "+", "+", true},          {OpKind::Mul, "*", "*", true},
    {OpKind::LessThan, "<", "<", true},
};

class Emitter {
  // An exp2 of a blocked sum whose argument is a monotone function of one loaded element
  // (plan_fast_exp2s).
  struct FastExp2 {
    int exp2 = -1;                    // the Exp2 statement's value
    int arg = -1;                     // its argument
    const Stmt* load = nullptr;       // the element the argument is computed from
    int max = -1;                     // a MaxReduce over the same elements (it keeps their minimum too)
    std::vector<const Stmt*> chain;   // the sum's statements computing arg from the load, in order
  };
 public:
  Emitter(const Kernel& k, const Dialect& d, std::string_view name) : k_(k), d_(d), name_(name) {
    if (d.cuda) divisors_ = invariant_divisors(k);
    for (const auto& p : k.phases) {
      collect_types(p.row_body);
      collect_types(p.col_body);
    }
  }

  std::string render() {
    // Helpers are guarded so that many kernels can share one translation unit.
    os_ << "/* luminal kernel " << name_ << " */\n#ifndef LUMINAL_KERNEL_HELPERS\n#define LUMINAL_KERNEL_HELPERS\n"
        << d_.includes;
    os_ << "#define LM_FN " << d_.fn << "\n#define LM_F2U " << d_.f2u << "\n#define LM_U2F " << d_.u2f
        << "\n#define LM_D2U " << d_.d2u << "\n#define LM_U2D " << d_.u2d << "\n#define LM_INF_D (" << d_.inf_d
        << ")\n#define LM_NAN_D (" << d_.nan_d << ")\n#define LM_INF_F (" << d_.inf_f << ")\n#define LM_NAN_F ("
        << d_.nan_f << ")\n" << d_.fma;
    if (!d_.cuda)
      os_ << "LM_FN unsigned lm_f2u_(float f) { return __builtin_bit_cast(unsigned, f); }\n"
             "LM_FN float lm_u2f_(unsigned u) { return __builtin_bit_cast(float, u); }\n"
             "LM_FN unsigned long long lm_d2u_(double f) { return __builtin_bit_cast(unsigned long long, f); }\n"
             "LM_FN double lm_u2d_(unsigned long long u) { return __builtin_bit_cast(double, u); }\n";
    else
      os_ << "LM_FN double lm_u2d_(unsigned long long u) { return __longlong_as_double((long long)u); }\n";
    os_ << Expression::c_prelude() << d_.report << kHelpers << d_.sin_f32 << kExpLog2Float << d_.warp_helpers << "#endif\n";
    if (d_.cuda) cuda_entry();
    else cpp_entry();
    return os_.str();
  }

 private:
  // ---- entry points ----
  void dims_prologue(std::string_view source) {
    const size_t n = k_.dim_names.size();
    for (size_t i = 0; i < n; ++i)
      line("const long long D" + std::to_string(i) + " = (long long)" + std::string(source) + "[" + std::to_string(i) + "];");
    for (size_t i = 0; i < divisors_.size(); ++i)
      line("const lm_divisor lm_dv" + std::to_string(i) + " = {(long long)" + std::string(source) + "[" +
           std::to_string(n + 2 * i) + "], (unsigned long long)" + std::string(source) + "[" + std::to_string(n + 2 * i + 1) +
           "]};");
  }
  std::string buffer_decl(size_t slot, DType dt, bool output) const {
    return std::string(output ? "" : "const ") + std::string(storage_type(dt)) + "* " + (d_.cuda ? "__restrict__ " : "__restrict ") +
           buffer_name(slot);
  }
  std::string buffer_name(size_t slot) const {
    return slot == k_.output_slot() ? "out" : "in" + std::to_string(slot);
  }

  void cpp_entry() {
    os_ << "extern \"C\" int64_t " << name_ << "_extent(const int64_t* dims) {\n";
    indent_ = 1;
    dims_prologue("dims");
    line("(void)dims;");
    line("return (int64_t)(" + expr(k_.extent) + ");");
    os_ << "}\n";
    os_ << "extern \"C\" void " << name_ << "(void* const* buffers, const int64_t* dims, int64_t begin, int64_t end) {\n";
    for (size_t i = 0; i <= k_.inputs.size(); ++i) {
      DType dt = i == k_.output_slot() ? k_.output : k_.inputs[i];
      line(buffer_decl(i, dt, i == k_.output_slot()) + " = (" + (i == k_.output_slot() ? "" : "const ") +
           std::string(storage_type(dt)) + "*)buffers[" + std::to_string(i) + "];");
    }
    line("int* lm_err = (int*)buffers[" + std::to_string(k_.error_slot()) + "];");
    line("(void)lm_err; (void)dims;");
    dims_prologue("dims");
    if (k_.geometry == Geometry::SingleBlock) {
      line("if (begin >= end) return;");
      for (const auto& p : k_.phases) {
        if (p.copies_input >= 0) open(unless_in_place(p));
        open("for (long long row = 0; row < " + expr(p.rows) + "; ++row) {");
        phase_body(p);
        close();
        if (p.copies_input >= 0) close();
      }
    } else if (k_.geometry == Geometry::Elementwise && k_.row_block > 0) {
      // Blocks of the last dim (Kernel::row_block): `$row` is lm_o * W + lm_i, with the
      // expressions simplified for that (a broadcast read becomes contiguous in lm_i).
      const std::string w = std::to_string(k_.row_block) + "LL";
      open("for (long long lm_o = begin / " + w + "; lm_o * " + w + " < end; ++lm_o) {");
      line("const long long lm_lo = begin > lm_o * " + w + " ? begin - lm_o * " + w + " : 0;");
      line("const long long lm_hi = end - lm_o * " + w + " < " + w + " ? end - lm_o * " + w + " : " + w + ";");
      line("#pragma omp simd");
      open("for (long long lm_i = lm_lo; lm_i < lm_hi; ++lm_i) {");
      row_block_ = k_.row_block;
      phase_body(k_.phases[0]);
      row_block_ = 0;
      close();
      close();
    } else {
      // Elementwise rows are independent (one element each): a SIMD loop.
      if (k_.geometry == Geometry::Elementwise) line("#pragma omp simd");
      open("for (long long row = begin; row < end; ++row) {");
      phase_body(k_.phases[0]);
      close();
    }
    os_ << "}\n";
  }

  void cuda_entry() {
    os_ << "extern \"C\" __global__ void " << name_ << "(";
    for (size_t i = 0; i <= k_.inputs.size(); ++i)
      os_ << buffer_decl(i, i == k_.output_slot() ? k_.output : k_.inputs[i], i == k_.output_slot()) << ", ";
    os_ << "int* lm_err, const long long* dims) {\n";
    indent_ = 1;
    line("LM_GRID_ENTER();");
    line("(void)lm_err; (void)dims;");
    dims_prologue("dims");
    const Phase& p0 = k_.phases[0];
    switch (k_.geometry) {
      case Geometry::Elementwise: {
        // A grid-stride loop: the runtime launches a thread per element, or, for large
        // outputs, a quarter of that, so that each thread's loads of four elements (the loop
        // unrolled) are in flight together. With one 2-byte load per thread an H200 kept too
        // few bytes in flight: a prefill's SwiGLU ran at a sixth of the copy bandwidth.
        // Where the output and some inputs are read at the element's own index, each thread
        // takes `vector_width` elements at once instead, through 16-byte loads and stores
        // (when the buffers are 16-byte aligned; the scalar loop does the rest).
        std::string first = "0";
        if (const int width = cuda_vector_width(k_); width > 1) {
          vector_loop(p0, width);
          first = "lm_vector_end";
        }
        line("#pragma unroll 4");
        open("for (long long row = " + first + " + (long long)blockIdx.x * blockDim.x + threadIdx.x; row < " +
             expr(p0.rows) + "; row += (long long)gridDim.x * blockDim.x) {");
        phase_body(p0);
        close();
        break;
      }
      case Geometry::WarpPerRow:
      case Geometry::BlockPerRow: {
        // A warp or a block per row; lm_lane is the thread's place in it. A block's
        // reductions end with a __syncthreads, which every thread of a block with a row reaches.
        const bool block = k_.geometry == Geometry::BlockPerRow;
        line(block ? "const long long row = (long long)blockIdx.x;"
                   : "const long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;");
        line(block ? "const int lm_lane = (int)threadIdx.x;" : "const int lm_lane = (int)(threadIdx.x & 31u);");
        line("if (row >= " + expr(p0.rows) + ") return;  /* whole " + (block ? "blocks" : "warps") + " leave together */");
        phase_body(p0);
        break;
      }
      case Geometry::SingleBlock: {
        // A scatter run in place (a KV-cache append) has no copy phase to wait for, so its
        // writes spread over every block the launch has (kernel::spread_blocks); otherwise
        // block 0 runs the phases in order, the others leave.
        const Phase& copy = k_.phases[0];
        line(std::string("const bool lm_spread = ") +
             (copy.copies_input >= 0 ? "(const void*)" + buffer_name(k_.output_slot()) + " == (const void*)" +
                                           buffer_name(static_cast<size_t>(copy.copies_input))
                                     : "false") +
             ";");
        line("if (!lm_spread && blockIdx.x != 0) return;");
        line("const long long lm_first = lm_spread ? (long long)blockIdx.x * blockDim.x + threadIdx.x : (long long)threadIdx.x;");
        line("const long long lm_step = lm_spread ? (long long)gridDim.x * blockDim.x : (long long)blockDim.x;");
        for (size_t i = 0; i < k_.phases.size(); ++i) {
          if (i) line("__syncthreads();");
          if (k_.phases[i].copies_input >= 0) open(unless_in_place(k_.phases[i]));
          open("for (long long row = lm_first; row < " + expr(k_.phases[i].rows) + "; row += lm_step) {");
          phase_body(k_.phases[i]);
          close();
          if (k_.phases[i].copies_input >= 0) close();
        }
        break;
      }
    }
    os_ << "}\n";
  }

  // The vectorized part of an elementwise kernel (cuda_vector_width): chunks of `width`
  // elements, each input read at the element's index and the output copied 16 bytes at a
  // time through registers; defines lm_vector_end, where the scalar loop starts.
  void vector_loop(const Phase& p, int width) {
    vector_buffers_ = flat_loads(k_);
    std::string aligned = "(unsigned long long)" + buffer_name(k_.output_slot());
    for (int b : vector_buffers_) aligned += " | (unsigned long long)" + buffer_name(static_cast<size_t>(b));
    line("const long long lm_n = " + expr(p.rows) + ";");
    line("const long long lm_vector_end = ((" + aligned + ") & 15ull) == 0 ? lm_n / " + std::to_string(width) + " * " +
         std::to_string(width) + " : 0;");
    open("for (long long lm_c = (long long)blockIdx.x * blockDim.x + threadIdx.x; lm_c * " + std::to_string(width) +
         " < lm_vector_end; lm_c += (long long)gridDim.x * blockDim.x) {");
    line("const long long lm_base = lm_c * " + std::to_string(width) + ";");
    const std::string w = std::to_string(width);
    for (int b : vector_buffers_) {
      const DType dt = k_.inputs[static_cast<size_t>(b)];
      line("alignas(16) " + std::string(storage_type(dt)) + " lm_x" + std::to_string(b) + "[" + w + "];");
      copy16(dt, "lm_x" + std::to_string(b), buffer_name(static_cast<size_t>(b)), width, true, "lm_base");
    }
    // Reads contiguous over the chunk but not at the element's own index (a transposed
    // view read in runs, RoPE's halves of a head): 16-byte copies where aligned.
    for (const auto* list : {&p.row_body, &p.col_body})
      for (const Stmt* s : chunk_accesses(*list, std::string(kRowVar), width)) {
        if (s->kind != StmtKind::Load || is_flat_load(*s)) continue;
        const std::string reg = "lm_c" + std::to_string(s->value);
        chunk_arrays_[s->value] = reg;
        line("alignas(16) " + std::string(storage_type(s->dtype)) + " " + reg + "[" + w + "];");
        const Expression base = Expression::var("$lm_base");
        chunk_copy(*s, reg, expr(s->index.substitute(kRowVar, base)), width, true, chunk_guard(*s, std::string(kRowVar), base));
      }
    line("alignas(16) " + std::string(storage_type(k_.output)) + " lm_y[" + w + "];");
    line("#pragma unroll");
    open("for (int lm_k = 0; lm_k < " + w + "; ++lm_k) {");
    line("const long long row = lm_base + lm_k;");
    line("(void)row;");
    in_vector_ = true;
    phase_body(p);
    in_vector_ = false;
    chunk_arrays_.clear();
    close();
    copy16(k_.output, "lm_y", buffer_name(k_.output_slot()), width, false, "lm_base");
    close();
  }

  // `count` elements of `dt` between registers `reg` and memory `mem` from index `offset`
  // (empty: 0), 16 bytes at a time.
  void copy16(DType dt, const std::string& reg, const std::string& mem, int count, bool load,
              const std::string& offset = "") {
    const size_t per = 16 / dtype_bytes(dt);  // elements per 16-byte copy
    for (size_t q = 0; q * per < static_cast<size_t>(count); ++q) {
      const std::string at = std::to_string(q * per), mem_at = offset.empty() ? at : offset + " + " + at;
      line(load ? "LM_COPY16(&" + reg + "[" + at + "], &" + mem + "[" + mem_at + "]);"
                : "LM_COPY16(&" + mem + "[" + mem_at + "], &" + reg + "[" + at + "]);");
    }
  }
  // Registers `reg` <-> the chunk of `s` (a load or the store) starting at index `at`: 16-byte
  // copies where that address is aligned, element by element where not (a row of odd length).
  void chunk_copy(const Stmt& s, const std::string& reg, const std::string& at, int width, bool load,
                  const std::string& guard = "") {
    const std::string t(storage_type(s.dtype)), w = std::to_string(width);
    if (!guard.empty()) {
      // The guard holds for the whole chunk or for none of it (chunk_accesses): where it does
      // not, the index may lie outside the buffer, and the registers read as zeros.
      open("if (!(" + guard + ")) {");
      line("#pragma unroll");
      line("for (int lm_k = 0; lm_k < " + w + "; ++lm_k) " + reg + "[lm_k] = 0;");
      --indent_;
      line("} else {");
      ++indent_;
    }
    open("{");
    line(std::string(load ? "const " : "") + t + "* lm_p = &" + buffer_name(static_cast<size_t>(s.buffer)) + "[" + at + "];");
    open("if (((unsigned long long)lm_p & 15ull) == 0) {");
    copy16(s.dtype, reg, "lm_p", width, load);
    --indent_;
    line("} else {");
    ++indent_;
    line("#pragma unroll");
    line("for (int lm_k = 0; lm_k < " + w + "; ++lm_k) " + (load ? reg + "[lm_k] = lm_p[lm_k];" : "lm_p[lm_k] = " + reg + "[lm_k];"));
    close();
    close();
    if (!guard.empty()) close();
  }
  // The guard of load `s` at the chunk starting at `start` (empty when unguarded).
  std::string chunk_guard(const Stmt& s, const std::string& var, const Expression& start) const {
    return s.kind == StmtKind::Load && !(s.guard == Expression(1)) ? expr(s.guard.substitute(var, start)) : std::string();
  }

  // A loop the row's threads share (a top-level reduction's, `step` accumulating each
  // element, or the columns') in chunks of chunk_ consecutive iterations: thread t takes
  // chunks t, t + threads, ... A full chunk copies its contiguous loads (chunk_accesses)
  // into registers and its store out of them 16 bytes at a time, and runs the body unrolled
  // over them; the row's last, partial chunk runs it element by element. Rows read one
  // element per thread and step had 2-byte loads in flight for BF16: a prefill RMSNorm over
  // (512, 4096) took 14-18 us on an H100 where its bytes take ~3.
  void chunk_loop(const std::string& var, const Expression& extent, const std::vector<Stmt>& body, const std::string& step) {
    const int width = chunk_;
    const std::string w = std::to_string(width), name = var.substr(1);
    const Expression x0 = Expression::var("$lm_x0");
    open("{");
    line("const long long lm_e = " + expr(extent) + ";");
    open("for (long long lm_q = lm_lane, lm_qi = 0; lm_q * " + w + " < lm_e; lm_q += " + lane_stride() + ", ++lm_qi) {");
    line("const long long lm_x0 = lm_q * " + w + ";");
    open("if (lm_x0 + " + w + " <= lm_e) {");
    const auto accesses = chunk_accesses(body, var, width);
    for (const Stmt* s : accesses) {
      if (s->kind == StmtKind::Store) {
        chunk_store_ = s;
        line("alignas(16) " + std::string(storage_type(s->dtype)) + " lm_y[" + w + "];");
        continue;
      }
      const std::string reg = "lm_c" + std::to_string(s->value);
      chunk_arrays_[s->value] = reg;
      line("alignas(16) " + std::string(storage_type(s->dtype)) + " " + reg + "[" + w + "];");
      chunk_copy(*s, reg, expr(s->index.substitute(var, x0)), width, true, chunk_guard(*s, var, x0));
    }
    chunk_var_ = var;
    chunk_fast_ = true;
    line("#pragma unroll");
    open("for (int lm_k = 0; lm_k < " + w + "; ++lm_k) {");
    line("const long long " + name + " = lm_x0 + lm_k;");
    stmts(body);
    if (!step.empty()) line(step);
    close();
    chunk_fast_ = false;
    chunk_arrays_.clear();
    if (chunk_store_) chunk_copy(*chunk_store_, "lm_y", expr(chunk_store_->index.substitute(var, x0)), width, false);
    chunk_store_ = nullptr;
    --indent_;
    line("} else {");
    ++indent_;
    open("for (long long " + name + " = lm_x0; " + name + " < lm_e; ++" + name + ") {");
    stmts(body);
    if (!step.empty()) line(step);
    close();
    close();
    close();
    close();
    chunk_var_.clear();
  }

  // A phase that copies an input whole into the output is void when they are one buffer
  // (a scatter run in place).
  std::string unless_in_place(const Phase& p) const {
    return "if ((const void*)" + buffer_name(k_.output_slot()) + " != (const void*)" +
           buffer_name(static_cast<size_t>(p.copies_input)) + ") {";
  }

  // Threads share one row: a warp's lanes (WarpPerRow) or a block's threads (BlockPerRow).
  bool lanes() const {
    return d_.lanes && (k_.geometry == Geometry::WarpPerRow || k_.geometry == Geometry::BlockPerRow);
  }
  bool block_row() const { return lanes() && k_.geometry == Geometry::BlockPerRow; }
  // How many threads share a row (they stride over its columns and reductions by it).
  std::string lane_stride() const { return block_row() ? "(long long)blockDim.x" : "32"; }

  void phase_body(const Phase& p) {
    chunk_ = lanes() ? row_chunk_width(k_, p) : 1;
    // Row scratch (Stash/Unstash): C++ keeps the row; on the GPU each lane keeps the
    // columns it owns (the reduction and the columns stride over the lanes alike, in
    // chunks of chunk_ columns).
    const std::string per_lane = chunk_ > 1 ? "((" + expr(p.cols) + " + " + std::to_string(32 * chunk_ - 1) + ") / " +
                                                  std::to_string(32 * chunk_) + ") * " + std::to_string(chunk_)
                                            : "(" + expr(p.cols) + " + 31) / 32";
    for (size_t k = 0; k < p.scratch.size(); ++k)
      line(std::string(value_type(p.scratch[k])) + " lm_scratch" + std::to_string(k) + "[" +
           (lanes() ? per_lane : expr(p.cols)) + "];");
    plan_fast_exp2s(p.row_body);
    top_level_ = true;
    stmts(p.row_body);
    top_level_ = false;
    if (p.cols == Expression(1)) {
      if (lanes()) open("if (lm_lane == 0) {");
      else open("{");
    } else if (lanes() && chunk_ > 1) {
      chunk_loop(std::string(kColVar), p.cols, p.col_body, {});
      return;
    } else if (lanes()) {
      line(kLaneUnroll);
      open("for (long long col = lm_lane; col < " + expr(p.cols) + "; col += " + lane_stride() + ") {");
    } else {
      line("#pragma omp simd");  // columns are independent: each stores its own element
      open("for (long long col = 0; col < " + expr(p.cols) + "; ++col) {");
    }
    stmts(p.col_body);
    close();
  }

  // ---- statements ----
  void stmts(const std::vector<Stmt>& list) {
    for (const auto& s : list) stmt(s);
  }

  void stmt(const Stmt& s) {
    const std::string v = "v" + std::to_string(s.value);
    const std::string decl = "const " + std::string(value_type(s.dtype)) + " " + v + " = ";
    switch (s.kind) {
      case StmtKind::Load: {
        std::string at = expr(s.index);
        if (d_.cuda && !(s.guard == Expression(1))) {
          // The index outside the guard: a compiler may not move a division out of a
          // condition (on a CPU it could trap), so each guarded load divided on its own (a
          // prefill RoPE element computed 12 divisions instead of the 3 its loads share).
          // On a GPU an integer division never traps, and the unguarded index is not read.
          line("const long long " + v + "_at = " + at + ";");
          at = v + "_at";
        }
        std::string ref = buffer_name(static_cast<size_t>(s.buffer)) + "[" + at + "]";
        if (in_vector_ && is_flat_load(s) && vector_buffers_.count(s.buffer)) ref = "lm_x" + std::to_string(s.buffer) + "[lm_k]";
        if (const auto it = chunk_arrays_.find(s.value); it != chunk_arrays_.end()) ref = it->second + "[lm_k]";
        std::string load = s.dtype == DType::F16    ? "lm_f16_to_f32(" + ref + ")"
                           : s.dtype == DType::BF16 ? "lm_bf16_to_f32(" + ref + ")"
                           : s.dtype == DType::Bool ? "(" + ref + " != 0)"
                                                    : ref;
        line(decl + (s.guard == Expression(1) ? load : "(" + expr(s.guard) + ") ? " + load + " : " + zero(s.dtype)) + ";");
        return;
      }
      case StmtKind::Constant: line(decl + literal(s.constant, s.dtype) + ";"); return;
      case StmtKind::Index: line(decl + convert("(" + expr(s.index) + ")", DType::I64, s.dtype) + ";"); return;
      case StmtKind::Cast: line(decl + convert(val(s.args[0]), type_of(s.args[0]), s.dtype) + ";"); return;
      case StmtKind::Select:
        if (s.args.size() == 3) line(decl + val(s.args[0]) + " ? " + val(s.args[1]) + " : " + val(s.args[2]) + ";");
        else line(decl + "(" + expr(s.index) + ") ? " + val(s.args[0]) + " : " + zero(s.dtype) + ";");
        return;
      case StmtKind::Alu: {
        std::string fused = horner_step(s);
        line(decl + (fused.empty() ? alu(s) : fused) + ";");
        return;
      }
      case StmtKind::Bound: {
        line("long long " + v + " = (long long)" + val(s.args[0]) + ";");
        std::string bad = v + " < 0 || " + v + " >= " + expr(s.index);
        if (!(s.axis_size == Expression(0))) {
          const std::string args = "(" + v + " - (" + expr(s.axis_base) + "), " + expr(s.axis_stride) + ")";
          bad += " || (lm_floormod" + args + " == 0 && (lm_floordiv" + args + " < 0 || lm_floordiv" + args +
                 " >= " + expr(s.axis_size) + "))";
        }
        line("if (" + bad + ") { if (" + expr(s.guard) + ") lm_report(lm_err, " + std::to_string(static_cast<int>(s.constant)) +
             ", " + std::to_string(s.site) + ", " + v + ", " + expr(s.position) + "); " + v + " = 0; }");
        return;
      }
      case StmtKind::Store: {
        std::string x = val(s.args[0]);
        std::string stored = s.dtype == DType::F16    ? "lm_f32_to_f16(" + x + ")"
                             : s.dtype == DType::BF16 ? "lm_f32_to_bf16(" + x + ")"
                                                      : "(" + std::string(storage_type(s.dtype)) + ")" + x;
        line((in_vector_ || &s == chunk_store_ ? std::string("lm_y[lm_k]")
                                               : buffer_name(static_cast<size_t>(s.buffer)) + "[" + expr(s.index) + "]") +
             " = " + stored + ";");
        return;
      }
      case StmtKind::Reduce: reduce(s); return;
      case StmtKind::Stash: line(scratch_ref(s) + " = " + val(s.args[0]) + ";"); return;
      case StmtKind::Unstash: line(decl + scratch_ref(s) + ";"); return;
    }
  }

  void reduce(const Stmt& s) {
    const bool sum = s.op == OpKind::SumReduce;
    const std::string acc = "a" + std::to_string(s.value), r = "r" + std::to_string(s.loop);
    const std::string at(accumulator_type(s.op, s.dtype));
    std::string init = sum ? "0" : (is_float(s.dtype) ? "-" + std::string(s.dtype == DType::F64 ? d_.inf_d : d_.inf_f)
                                                      : "(-9223372036854775807LL - 1LL)");
    line(at + " " + acc + " = " + init + ";");
    const bool split = lanes() && top_level_;
    bool outer = top_level_;
    top_level_ = false;
    const std::string header = split ? "for (long long " + r + " = lm_lane; " + r + " < " + expr(s.index) + "; " + r + " += " + lane_stride() + ") {"
                                     : "for (long long " + r + " = 0; " + r + " < " + expr(s.index) + "; ++" + r + ") {";
    std::string x = "(" + at + ")" + val(s.args[0]);
    // C++: an innermost reduction of a single-precision value runs as a SIMD loop (lanes
    // of partial results). Sums accumulate in double (long ones by groups of four added in
    // float: blocked_sum), so reordering them changes the rounded result only in rare
    // cancellations; F64 sums keep their order. A maximum is
    // order-free except for the sign of a zero maximum (the first zero's, as in the
    // reference): that case, and NaN, are settled after the loop.
    const bool simd = !d_.cuda && is_float(s.dtype) && s.dtype != DType::F64 && !contains_reduce(s.body);
    if (simd && sum && !contains_kind(s.body, StmtKind::Bound)) {
      blocked_sum(s, acc, r);
    } else if (simd && sum) {  // checked gathers report the first bad index in order
      line("#pragma omp simd reduction(+:" + acc + ")");
      open(header);
      stmts(s.body);
      line(acc + " = " + acc + " + " + x + ";");
      close();
    } else if (simd) {
      const std::string nan = acc + "_nan", xv = acc + "_x", lo = acc + "_lo";
      const bool keep_min = row_minima_.count(s.value) > 0;  // plan_fast_exp2s
      line("int " + nan + " = 0;");
      if (keep_min) line(at + " " + lo + " = " + std::string(d_.inf_f) + ";");
      line("#pragma omp simd reduction(max:" + acc + ") reduction(|:" + nan + ")" +
           (keep_min ? " reduction(min:" + lo + ")" : ""));
      open(header);
      stmts(s.body);
      line("const " + at + " " + xv + " = " + x + ";");
      line(nan + " |= " + xv + " != " + xv + ";");
      line(acc + " = " + xv + " > " + acc + " ? " + xv + " : " + acc + ";");
      if (keep_min) line(lo + " = " + xv + " < " + lo + " ? " + xv + " : " + lo + ";");
      close();
      if (keep_min)  // the row's smallest element (NaN is flagged in the maximum)
        line("const " + std::string(value_type(s.dtype)) + " v" + std::to_string(s.value) + "_lo = (" +
             std::string(value_type(s.dtype)) + ")" + lo + ";");
      line("if (" + nan + ") " + acc + " = " + std::string(d_.nan_f) + ";");
      open("else if (" + acc + " == 0) {");
      line(acc + " = " + init + ";");
      open(header);
      stmts(s.body);
      line(acc + " = lm_rmax(" + acc + ", " + x + ");");
      close();
      close();
    } else {
      const std::string step = sum ? acc + " = " + (is_float(s.dtype) ? acc + " + " + x : "lm_wrap_add(" + acc + ", " + x + ")") + ";"
                                   : acc + " = lm_rmax(" + acc + ", " + x + ");";
      if (split && chunk_ > 1) {
        chunk_loop("$" + r, s.index, s.body, step);
      } else {
        if (split) line(kLaneUnroll);
        open(header);
        stmts(s.body);
        line(step);
        close();
      }
    }
    top_level_ = outer;
    if (split)
      line(acc + " = " + (block_row() ? (sum ? "lm_block_sum(" : "lm_block_max(") : (sum ? "lm_lane_sum(" : "lm_lane_max(")) +
           acc + ");");
    std::string result = "(" + std::string(value_type(s.dtype)) + ")" + acc;
    if (is_half_float(s.dtype)) result = round_half(s.dtype, "(float)" + acc);
    line("const " + std::string(value_type(s.dtype)) + " v" + std::to_string(s.value) + " = " + result + ";");
  }

  // A single-precision sum of kBlockedSumMin or more elements: a SIMD loop over groups of
  // four, one element from each quarter of the range, added in float as (x0 + x1) + (x2 + x3),
  // and the group's sum in double. Converting every element to double cost a fifth of
  // softmax's time (two conversions and two double adds per 16 floats, against one float add
  // per group member here); the two float roundings add at most 2^-23 of the four magnitudes,
  // so a sum stays within ~1.2e-7 of sum(|x|) of the all-double one. Shorter sums (and the
  // last n % 4 elements) add every element in double, as before.
  static constexpr int kBlockedSumMin = 64;
  void blocked_sum(const Stmt& s, const std::string& acc, const std::string& r) {
    const std::string n = acc + "_n", q = acc + "_q", g = acc + "_g", vt(value_type(type_of(s.args[0])));
    open("{");
    line("const long long " + n + " = " + expr(s.index) + ";");
    line("const long long " + q + " = " + n + " >= " + std::to_string(kBlockedSumMin) + " ? " + n + " / 4 : 0;");
    auto groups = [&] {
      line("#pragma omp simd reduction(+:" + acc + ")");
      open("for (long long " + g + " = 0; " + g + " < " + q + "; ++" + g + ") {");
      line(vt + " " + acc + "_0, " + acc + "_1, " + acc + "_2, " + acc + "_3;");
      // These groups may compute exp2 by lm_exp2f_or_nan wherever its NaN reaches the sum:
      // a sum that comes out NaN is computed again below, element by element, with lm_exp2f.
      exp2_or_nan_ = nan_reaches(s.body, s.args[0]);
      for (int part = 0; part < 4; ++part) {
        const std::string k = std::to_string(part);
        open("{");
        line("const long long " + r + " = " + g + " + " + k + " * " + q + ";");
        stmts(s.body);
        line(acc + "_" + k + " = " + val(s.args[0]) + ";");
        close();
      }
      exp2_or_nan_.clear();
      line(acc + " = " + acc + " + (double)((" + acc + "_0 + " + acc + "_1) + (" + acc + "_2 + " + acc + "_3));");
      close();
    };
    const auto fast = fast_exp2s_.find(s.value);
    if (fast == fast_exp2s_.end()) {
      groups();
    } else {
      // The arguments of the row's smallest and largest elements bound every argument
      // (plan_fast_exp2s); inside (-126, 126) the groups skip lm_exp2f_or_nan's range checks.
      const std::string in_range = acc + "_in_range";
      line("bool " + in_range + " = true;");
      for (const FastExp2& f : fast->second)
        for (const char* bound : {"_lo", ""}) {
          open("{");
          const std::string load_type(value_type(f.load->dtype));
          line("const " + load_type + " " + val(f.load->value) + " = " + val(f.max) + bound + ";");
          for (const Stmt* c : f.chain) stmt(*c);
          line(in_range + " = " + in_range + " && " + val(f.arg) + " > -126.0f && " + val(f.arg) + " < 126.0f;");
          close();
        }
      open("if (" + in_range + ") {");
      for (const FastExp2& f : fast->second) exp2_in_range_.insert(f.exp2);
      groups();
      exp2_in_range_.clear();
      close();
      open("else {");
      groups();
      close();
    }
    line("#pragma omp simd reduction(+:" + acc + ")");
    open("for (long long " + r + " = 4 * " + q + "; " + r + " < " + n + "; ++" + r + ") {");
    stmts(s.body);
    line(acc + " = " + acc + " + (double)" + val(s.args[0]) + ";");
    close();
    // A group's float sum can overflow where the double sum does not (3e38 + 3e38 - 3e38):
    // a sum that came out infinite or NaN is added again element by element in double
    // (an infinite or NaN element gives the same result; its row's terms are computed twice),
    // its exp2s and stashes by the exact lm_exp2f.
    open("if (" + q + " > 0 && !(" + acc + " - " + acc + " == 0)) {");
    line(acc + " = 0;");
    open("for (long long " + r + " = 0; " + r + " < " + n + "; ++" + r + ") {");
    stmts(s.body);
    line(acc + " = " + acc + " + (double)" + val(s.args[0]) + ";");
    close();
    close();
    close();
  }

  // ---- exp2 in sums whose arguments' range is known before the loop ----
  // A softmax sums exp2((x - max) * log2 e) over its row after a MaxReduce read the same
  // x. Where an exp2 of a blocked sum (its NaN reaching the sum: lm_exp2f_or_nan) has an
  // argument computed from one loaded element by additions and multiplications with values
  // fixed for the row, and a top-level MaxReduce before the sum read the same elements, that
  // MaxReduce keeps the row's minimum as well. The argument is a monotone function of the
  // element (x + c and x * c with c fixed, and roundings, are monotone in IEEE arithmetic),
  // so its values at the row's smallest and largest element bound every element's; when
  // both lie in (-126, 126) the groups take lm_exp2f_in_range (the same bits, no range
  // checks). A NaN or infinite element, a masked score (-1e9) or a row spanning more than
  // 126 / log2 e takes lm_exp2f_or_nan as before; a NaN among the terms still sends the
  // sum to its exact fallback. (64, 4096) softmax kernel, 32 rows on one Zen 3 core:
  // 0.090 -> 0.075 ms.
  void plan_fast_exp2s(const std::vector<Stmt>& row_body) {
    fast_exp2s_.clear();
    row_minima_.clear();
    if (d_.cuda || lanes()) return;
    std::vector<const Stmt*> maxima;  // top-level MaxReduces of a loaded element
    for (const Stmt& s : row_body) {
      if (s.kind != StmtKind::Reduce || !is_float(s.dtype) || s.dtype == DType::F64 || contains_reduce(s.body)) continue;
      if (s.op == OpKind::MaxReduce) {
        for (const Stmt& e : s.body)
          if (e.value == s.args[0] && e.kind == StmtKind::Load && e.guard == Expression(1) && e.dtype == s.dtype)
            maxima.push_back(&s);
        continue;
      }
      if (contains_kind(s.body, StmtKind::Bound)) continue;  // not a blocked sum
      const std::set<int> reach = nan_reaches(s.body, s.args[0]);
      for (const Stmt& e : s.body) {
        if (e.kind != StmtKind::Alu || e.op != OpKind::Exp2 || !reach.count(e.value) || type_of(e.args[0]) == DType::F64)
          continue;
        FastExp2 f;
        if (!monotone_chain(s.body, e.args[0], f)) continue;
        f.exp2 = e.value;
        const Expression r = Expression::var("$r" + std::to_string(s.loop));
        for (const Stmt* m : maxima) {
          const Stmt* l = def(m->args[0]);
          if (m->index == s.index && l->buffer == f.load->buffer && l->dtype == f.load->dtype &&
              l->index.substitute("$r" + std::to_string(m->loop), r) == f.load->index) {
            f.max = m->value;
            break;
          }
        }
        if (f.max < 0) continue;
        row_minima_.insert(f.max);
        fast_exp2s_[s.value].push_back(std::move(f));
      }
    }
  }

  // Whether `arg`, computed in `body`, is a monotone function of one loaded element: it
  // reads exactly one Load (unguarded, a float dtype) through Add and Mul statements whose
  // other operand does not depend on it, and float-to-float Casts; whatever else it reads
  // is defined outside `body` or computed there without loads, indexes or selects (the
  // row's constants). Fills f.load and f.chain (the statements after the load, in order).
  bool monotone_chain(const std::vector<Stmt>& body, int arg, FastExp2& f) const {
    std::set<int> local, needed{arg}, varies;
    for (const Stmt& s : body)
      if (s.value >= 0) local.insert(s.value);
    std::vector<const Stmt*> order;
    for (auto it = body.rbegin(); it != body.rend(); ++it) {
      if (it->value < 0 || !needed.count(it->value)) continue;
      for (int a : it->args)
        if (local.count(a)) needed.insert(a);
      order.push_back(&*it);
    }
    std::reverse(order.begin(), order.end());
    for (const Stmt* s : order) {
      int varying = 0;
      for (int a : s->args) varying += static_cast<int>(varies.count(a));
      switch (s->kind) {
        case StmtKind::Load:
          if (f.load != nullptr || s->guard != Expression(1) || !is_float(s->dtype) || s->dtype == DType::F64) return false;
          f.load = s;
          varies.insert(s->value);
          continue;
        case StmtKind::Constant: break;
        case StmtKind::Cast:
          if (varying > 0 && !(is_float(s->dtype) && is_float(type_of(s->args[0])))) return false;
          break;
        case StmtKind::Alu:
          if (varying > 0 && ((s->op != OpKind::Add && s->op != OpKind::Mul) || varying != 1 || !is_float(s->dtype)))
            return false;
          if (s->op == OpKind::Mod) return false;  // may report an error
          break;
        default: return false;  // a load, index, select or scratch read: not fixed for the row
      }
      if (varying > 0) varies.insert(s->value);
      f.chain.push_back(s);
    }
    f.arg = arg;
    return f.load != nullptr && varies.count(arg) > 0;
  }

  // The values of `body` whose NaN makes `result` NaN: `result`, and transitively the
  // operands of float operations that return NaN for a NaN in any operand (+, *, exp2,
  // 1/x, sqrt, conversions between float types). A select, a comparison, a maximum or an
  // integer conversion may drop a NaN, so what reaches `result` only through them is not in.
  std::set<int> nan_reaches(const std::vector<Stmt>& body, int result) const {
    std::set<int> reach{result};
    for (auto it = body.rbegin(); it != body.rend(); ++it) {
      if (!reach.count(it->value) || it->args.empty() || !is_float(type_of(it->args[0]))) continue;
      const bool propagates =
          (it->kind == StmtKind::Alu && (it->op == OpKind::Add || it->op == OpKind::Mul || it->op == OpKind::Exp2 ||
                                         it->op == OpKind::Recip || it->op == OpKind::Sqrt)) ||
          (it->kind == StmtKind::Cast && is_float(it->dtype));
      if (propagates) reach.insert(it->args.begin(), it->args.end());
    }
    return reach;
  }

  // Loops whose iterations a row's lanes share (CUDA): unrolled, so that each thread has
  // several loads in flight. Without it every iteration waited for its load before the
  // next was issued: a decode step's RMSNorm, one block over 4096 elements (16 per
  // thread), took 8.7 us on the H200.
  static constexpr const char* kLaneUnroll = "#pragma unroll 4";

  std::string scratch_ref(const Stmt& s) const {
    // A thread owns the columns it visits: scratch slot = column / threads sharing the row
    // (sized for 32 of them, the fewest a row has).
    std::string slot = block_row() ? "(" + expr(s.index) + ") / (long long)blockDim.x" : "(" + expr(s.index) + ") >> 5";
    if (chunk_ > 1) {
      // In chunks: the thread's i-th chunk of chunk_ columns fills slots [i*chunk_, (i+1)*chunk_).
      const std::string w = std::to_string(chunk_), at = "(" + expr(s.index) + ")";
      slot = chunk_fast_ && s.index == Expression::var(chunk_var_)
                 ? "lm_qi * " + w + " + lm_k"
                 : "(" + at + " / (" + w + " * " + lane_stride() + ")) * " + w + " + " + at + " % " + w;
    }
    return "lm_scratch" + std::to_string(s.buffer) + "[" + (lanes() ? slot : expr(s.index)) + "]";
  }

  std::string alu(const Stmt& s) const {
    const DType in = type_of(s.args[0]);
    std::string a = val(s.args[0]), b = s.args.size() > 1 ? val(s.args[1]) : "";
    if (s.op == OpKind::Exp2 && in != DType::F64 && (exp2_or_nan_.count(s.value) || exp2_in_range_.count(s.value))) {
      const std::string e = (exp2_in_range_.count(s.value) ? "lm_exp2f_in_range(" : "lm_exp2f_or_nan(") + a + ")";
      return is_half_float(in) ? round_half(in, e) : e;
    }
    if (is_float(in)) {
      for (const auto& sp : kFloatOps)
        if (sp.op == s.op) {
          std::string name(in == DType::F64 ? sp.f64 : sp.f32);
          std::string e = sp.infix ? "(" + a + " " + name + " " + b + ")" : name + "(" + a + (b.empty() ? "" : ", " + b) + ")";
          return s.op == OpKind::LessThan ? e : (is_half_float(in) ? round_half(in, e) : e);
        }
      LUMINAL_ASSERT(false, "no float spelling for ", op_name(s.op));
    }
    const std::string t(value_type(s.dtype));
    switch (s.op) {
      case OpKind::LessThan: return "(" + a + " < " + b + ")";
      case OpKind::Add: return in == DType::Bool ? "(" + a + " || " + b + ")" : "(" + t + ")lm_wrap_add(" + a + ", " + b + ")";
      case OpKind::Mul: return in == DType::Bool ? "(" + a + " && " + b + ")" : "(" + t + ")lm_wrap_mul(" + a + ", " + b + ")";
      case OpKind::Mod:
        return "(" + t + ")lm_imod(" + a + ", " + b + ", lm_err, (" + expr(s.guard) + ") != 0)";
      default: LUMINAL_ASSERT(false, "integer ", op_name(s.op));
    }
    return "";
  }

  // Convert a value of dtype `from` (in its value type) to dtype `to`.
  std::string convert(const std::string& x, DType from, DType to) const {
    if (to == DType::Bool) return "(" + x + " != 0)";
    if (!is_float(to)) {
      std::string wide = is_float(from) ? "lm_f2i((double)" + x + ")" : "(long long)" + x;
      return "(" + std::string(value_type(to)) + ")" + wide;
    }
    // Integers go through double, as in the reference; one of 32 bits or fewer is exact in
    // double, so converting it directly rounds once to the same value (and vectorises in
    // 16 lanes, where the int64 -> double -> float route took 8: a masked softmax's max
    // loop stayed scalar).
    std::string wide = is_float(from) || from != DType::I64 ? x : "(double)(long long)" + x;
    if (is_half_float(to)) return round_half(to, "(float)" + wide);
    return "(" + std::string(value_type(to)) + ")" + wide;
  }
  static std::string round_half(DType dt, const std::string& x) {
    return (dt == DType::F16 ? "lm_round_f16(" : "lm_round_bf16(") + x + ")";
  }

  std::string literal(double c, DType dt) const {
    if (!is_float(dt)) {
      if (dt == DType::Bool) return c != 0 ? "true" : "false";
      auto i = static_cast<int64_t>(c);
      if (i == INT64_MIN) return "(" + std::string(value_type(dt)) + ")(-9223372036854775807LL - 1LL)";
      return "(" + std::string(value_type(dt)) + ")" + std::to_string(i) + "LL";
    }
    const bool dbl = dt == DType::F64;
    if (std::isnan(c)) return std::string(dbl ? d_.nan_d : d_.nan_f);
    if (std::isinf(c)) return (c < 0 ? "-" : "") + std::string(dbl ? d_.inf_d : d_.inf_f);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%a", c);
    return "(" + std::string(value_type(dt)) + ")" + buf;
  }
  std::string zero(DType dt) const { return "(" + std::string(value_type(dt)) + ")0"; }

  std::string expr(const Expression& given) const {
    Expression e = given;
    if (row_block_ > 0 && e.depends_on(kRowVar))
      e = fold_loop_extent(
          e.substitute(kRowVar, Expression::var("$lm_o") * row_block_ + Expression::var("$lm_i")).simplify(), "$lm_i",
          row_block_);
    return e.to_c(
        [this](const std::string& name) -> std::string {
          if (!name.empty() && name[0] == '$') return name.substr(1);
          for (size_t i = 0; i < k_.dim_names.size(); ++i)
            if (k_.dim_names[i] == name) return "D" + std::to_string(i);
          LUMINAL_ASSERT(false, "kernel expression uses unknown variable ", name);
          return "";
        },
        [this](const Expression& divisor) -> std::string {
          const auto it = std::find(divisors_.begin(), divisors_.end(), divisor);
          return it == divisors_.end() ? std::string() : "lm_dv" + std::to_string(it - divisors_.begin());
        });
  }
  static std::string val(int v) {
    std::string r = "v";  // (appended: GCC 12's -Wrestrict misfires on "literal" + std::string)
    r += std::to_string(v);
    return r;
  }
  DType type_of(int v) const { return types_.at(static_cast<size_t>(v)); }

  void collect_types(const std::vector<Stmt>& list) {
    for (const auto& s : list) {
      if (s.value >= 0) {
        if (types_.size() <= static_cast<size_t>(s.value)) types_.resize(static_cast<size_t>(s.value) + 1, DType::F32);
        types_[static_cast<size_t>(s.value)] = s.dtype;
        defs_[s.value] = &s;
      }
      for (int a : s.args) ++uses_[a];
      collect_types(s.body);
    }
  }

  // ---- polynomials: a*b + c as one fused multiply-add ----
  // Kernels compile with -ffp-contract=off (no FMA changes a rounding of the region's own
  // arithmetic), except in one shape: a Horner step of an F32 polynomial with constant
  // coefficients, `p*x + c` where c is a constant and p is a constant or another such step
  // (erf's fits; affine maps such as tanh's 1 - e, exact either way). Fused, the step is rounded once
  // instead of twice: within half an ulp of p*x of the unfused value, which any consumer of
  // a fitted polynomial already tolerates (its fit error is larger). Coefficients are
  // bounded (|c| < 2^64), so a product that overflows also overflows fused: +-inf, NaN and
  // signed zeros come out as unfused. Both the Mul and the Add must be F32, and the Mul's
  // only use is this Add.
  static constexpr double kMaxCoefficient = 18446744073709551616.0;  // 2^64
  const Stmt* def(int v) const {
    auto it = defs_.find(v);
    return it == defs_.end() ? nullptr : it->second;
  }
  bool is_coefficient(int v) const {
    const Stmt* d = def(v);
    if (d == nullptr || d->dtype != DType::F32) return false;
    if (d->kind == StmtKind::Constant) return std::isfinite(d->constant) && std::abs(d->constant) < kMaxCoefficient;
    return horner_.count(v) > 0;
  }
  // The FMA spelling of an Add statement, or "" when it is not a Horner step.
  std::string horner_step(const Stmt& add) {
    if (d_.cuda || add.op != OpKind::Add || add.dtype != DType::F32 || add.args.size() != 2) return "";
    for (int k = 0; k < 2; ++k) {
      const Stmt* mul = def(add.args[static_cast<size_t>(k)]);
      const int c = add.args[static_cast<size_t>(1 - k)];
      const Stmt* cd = def(c);
      if (mul == nullptr || mul->kind != StmtKind::Alu || mul->op != OpKind::Mul || mul->dtype != DType::F32 ||
          uses_[mul->value] != 1 || cd == nullptr || cd->kind != StmtKind::Constant || !is_coefficient(c))
        continue;
      if (!is_coefficient(mul->args[0]) && !is_coefficient(mul->args[1])) continue;
      if (type_of(mul->args[0]) != DType::F32 || type_of(mul->args[1]) != DType::F32) continue;
      horner_.insert(add.value);
      return "LM_FMAF(" + val(mul->args[0]) + ", " + val(mul->args[1]) + ", " + val(c) + ")";
    }
    return "";
  }

  void line(const std::string& text) { os_ << std::string(static_cast<size_t>(indent_) * 2, ' ') << text << "\n"; }
  void open(const std::string& text) {
    line(text);
    ++indent_;
  }
  void close() {
    --indent_;
    line("}");
  }



  const Kernel& k_;
  const Dialect& d_;
  std::vector<Expression> divisors_;  // CUDA: invariant_divisors(k_), read from the dims array
  std::set<int> exp2_or_nan_;         // values whose exp2 may be lm_exp2f_or_nan (blocked_sum)
  std::set<int> exp2_in_range_;       // there: values whose argument was checked to lie in (-126, 126)
  std::map<int, std::vector<FastExp2>> fast_exp2s_;  // sum value -> its exp2s with bounded arguments
  std::set<int> row_minima_;          // MaxReduce values that also keep their minimum (v<N>_lo)
  int64_t row_block_ = 0;  // inside an elementwise kernel's blocked loop (Kernel::row_block)
  bool in_vector_ = false;       // inside vector_loop's per-element body
  int chunk_ = 1;                // row_chunk_width of the phase being emitted (CUDA lanes)
  std::string chunk_var_;        // inside a chunk_loop: its variable
  bool chunk_fast_ = false;      // inside a chunk_loop's full, register-held chunk
  std::map<int, std::string> chunk_arrays_;  // there: load value -> the registers holding its chunk
  const Stmt* chunk_store_ = nullptr;        // there: the store that goes to lm_y
  std::set<int> vector_buffers_;  // inputs vector_loop reads into registers
  std::string name_;
  std::ostringstream os_;
  std::vector<DType> types_;
  std::map<int, const Stmt*> defs_;  // value -> its defining statement
  std::map<int, int> uses_;          // value -> statements reading it
  std::set<int> horner_;             // Adds emitted as a Horner step
  int indent_ = 1;
  bool top_level_ = false;
};

void check_name(std::string_view name) {
  LUMINAL_CHECK(!name.empty() && !std::isdigit(static_cast<unsigned char>(name[0])), "kernel name '", name,
                "' is not a C identifier");
  for (char c : name)
    LUMINAL_CHECK(std::isalnum(static_cast<unsigned char>(c)) || c == '_', "kernel name '", name, "' is not a C identifier");
}

}  // namespace

std::string emit_cpp(const Kernel& kernel, std::string_view name) {
  check_name(name);
  return Emitter(kernel, kCpp, name).render();
}

std::string emit_cuda(const Kernel& kernel, std::string_view name) {
  check_name(name);
  return Emitter(kernel, kCuda, name).render();
}

namespace {
bool is_loop_variable(const std::string& name) { return !name.empty() && name[0] == '$'; }
void collect_divisors(const Expression& e, std::vector<Expression>& out) {
  if (e.kind() == ExprKind::Div || e.kind() == ExprKind::Mod) {
    const Expression& d = e.children()[1];
    const auto vars = d.variables();
    if (!d.is_constant() && !vars.empty() && std::none_of(vars.begin(), vars.end(), is_loop_variable) &&
        std::find(out.begin(), out.end(), d) == out.end())
      out.push_back(d);
  }
  for (const auto& c : e.children()) collect_divisors(c, out);
}
void collect_divisors(const std::vector<Stmt>& body, std::vector<Expression>& out) {
  for (const auto& st : body) {
    for (const Expression* e : {&st.index, &st.guard, &st.position, &st.axis_base, &st.axis_stride, &st.axis_size})
      collect_divisors(*e, out);
    collect_divisors(st.body, out);
  }
}
}  // namespace

int cuda_vector_width(const Kernel& k) {
  if (k.geometry != Geometry::Elementwise || k.phases.size() != 1) return 1;
  const Phase& p = k.phases.front();
  if (!(p.cols == Expression(1)) || !p.scratch.empty() || contains_kind(p.row_body, StmtKind::Store)) return 1;
  // The one store writes the element's own index.
  int stores = 0;
  for (const auto& s : p.col_body) {
    if (s.kind != StmtKind::Store) continue;
    ++stores;
    if (!(s.index == Expression::var(kRowVar)) || s.buffer != static_cast<int>(k.output_slot())) return 1;
  }
  for (const auto& s : p.col_body)
    if (s.kind != StmtKind::Store && contains_kind(s.body, StmtKind::Store)) return 1;
  const size_t out_bytes = dtype_bytes(k.output);
  if (stores != 1 || out_bytes < 2 || out_bytes > 8) return 1;
  size_t smallest = out_bytes;
  for (int b : flat_loads(k)) smallest = std::min(smallest, dtype_bytes(k.inputs[static_cast<size_t>(b)]));
  return static_cast<int>(16 / smallest);
}

int cuda_row_chunk_width(const Kernel& k) {
  return lane_geometry(k) && !k.phases.empty() ? row_chunk_width(k, k.phases.front()) : 1;
}

std::vector<Expression> invariant_divisors(const Kernel& kernel) {
  std::vector<Expression> out;
  for (const auto& p : kernel.phases) {
    collect_divisors(p.rows, out);
    collect_divisors(p.cols, out);
    collect_divisors(p.row_body, out);
    collect_divisors(p.col_body, out);
  }
  return out;
}

std::vector<Expression> cuda_dims_entries(const Kernel& kernel) {
  std::vector<Expression> out;
  for (const auto& name : kernel.dim_names) out.push_back(Expression::var(name));
  // ceil(2^62 / d) for d in [1, 2^31]: floor(a / d) = floor(a * m / 2^62) for every a in
  // [0, 2^31) (Granlund and Montgomery 1994, theorem 4.2, with N = l = 31).
  const Expression two_62 = Expression(int64_t{1} << 62);
  for (const auto& d : invariant_divisors(kernel)) {
    out.push_back(d);
    out.push_back(logical_and(ge(d, 1), le(d, int64_t{1} << 31)) * ceil_div(two_62, max(d, 1)));
  }
  return out;
}

}  // namespace luminal::kernel
