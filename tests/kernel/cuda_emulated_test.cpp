// Runs the emitted CUDA source on the CPU under a small emulation of the CUDA execution
// model (one warp per block, lanes as threads in lockstep at every shuffle and barrier),
// so the warp-per-row reductions, lane-strided loops and the single-block Scatter are
// checked against the reference on machines without a GPU.
#include "cuda_cases.hpp"

namespace luminal::kernel::testing {
namespace {

// Defines what the CUDA source uses: qualifiers, built-in indexes, bit casts, shuffles.
constexpr std::string_view kShim = R"(#include <math.h>
#include <barrier>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __shared__ static /* blocks run one after another: one copy serves each in turn */
struct lm_dim3 { unsigned x = 0, y = 0, z = 0; };
static thread_local lm_dim3 threadIdx, blockIdx;
static lm_dim3 blockDim, gridDim;
static std::barrier<>* lm_warp_barrier;
static inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline double __longlong_as_double(long long i) { double d; std::memcpy(&d, &i, 8); return d; }
static inline long long __double_as_longlong(double d) { long long i; std::memcpy(&i, &d, 8); return i; }
static inline void __syncthreads() { lm_warp_barrier->arrive_and_wait(); }
static inline int atomicCAS(int* p, int compare, int value) {
  __atomic_compare_exchange_n(p, &compare, value, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return compare;
}
template <class T>
static T __shfl_xor_sync(unsigned, T v, int mask) {
  static T slots[32];
  unsigned lane = threadIdx.x & 31u;
  slots[lane] = v;
  lm_warp_barrier->arrive_and_wait();
  T r = slots[lane ^ (unsigned)mask];
  lm_warp_barrier->arrive_and_wait();
  return r;
}
)";

constexpr std::string_view kLauncher = R"(
template <class... P, size_t... I>
static void lm_call(void (*f)(P...), void** a, std::index_sequence<I...>) { f(static_cast<P>(a[I])...); }
extern "C" void lm_launch(void** args, unsigned grid, unsigned block) {
  std::barrier<> barrier(block);
  lm_warp_barrier = &barrier;
  blockDim.x = block;
  gridDim.x = grid;
  std::vector<std::thread> lanes;
  for (unsigned t = 0; t < block; ++t)
    lanes.emplace_back([&, t] {
      threadIdx.x = t;
      for (unsigned b = 0; b < grid; ++b) {
        blockIdx.x = b;
        lm_call(lm_kernel, args, std::make_index_sequence<NARGS>{});
        barrier.arrive_and_wait();
      }
    });
  for (auto& l : lanes) l.join();
}
)";

TEST(KernelCudaEmulated, WarpsLanesAndBarriersMatchTheReference) {
  HostCompilerOptions options;
  options.flags = {"-O1", "-fPIC", "-shared", "-std=c++20", "-pthread", "-ffp-contract=off", "-w"};
  HostCompiler compiler(options);
  run_cuda_cases([&](const Kernel& k, const std::string& source, std::vector<std::pair<void*, size_t>>& buffers,
                     std::vector<long long>& dims) {
    std::string launcher(kLauncher);
    std::string nargs = std::to_string(buffers.size() + 1);
    launcher.replace(launcher.find("NARGS"), 5, nargs);
    auto lib = compiler.compile(std::string(kShim) + source + launcher);
    std::vector<void*> args;
    for (auto& b : buffers) args.push_back(b.first);
    args.push_back(dims.data());
    DimMap dm;
    for (size_t i = 0; i < k.dim_names.size(); ++i) dm[k.dim_names[i]] = dims[i];
    // One warp per block: a warp-per-row kernel gets one row per block.
    const int64_t rows = k.phases[0].rows.eval(dm);
    const bool row_per_block = k.geometry == Geometry::WarpPerRow || k.geometry == Geometry::BlockPerRow;
    int64_t grid = k.geometry == Geometry::Elementwise ? (rows + 31) / 32 : row_per_block ? rows : 1;
    if (grid > 0) lib->function<void(void**, unsigned, unsigned)>("lm_launch")(args.data(), static_cast<unsigned>(grid), 32);
  });
}

// Division by an invariant divisor through its multiplier (lm_floordiv_inv, the runtime's
// entries from cuda_dims_entries): equal to floor division and modulo for every dividend
// sign and size, the multiply's range [0, 2^31) and the fallback outside it, and divisors
// from 1 to past 2^31 (no multiplier there).
TEST(KernelCudaEmulated, InvariantDivisorsDivideByAMultiply) {
  const Expression seq = Expression::var("seq");
  Graph cx;
  (cx.tensor({seq, 7}).permute({1, 0}) * 1.5).output();
  auto k = lower(Region{cx});
  ASSERT_TRUE(k.has_value());
  const auto divisors = invariant_divisors(*k);
  ASSERT_FALSE(divisors.empty()) << to_string(*k);
  const auto entries = cuda_dims_entries(*k);
  ASSERT_EQ(entries.size(), k->dim_names.size() + 2 * divisors.size());
  ASSERT_EQ(divisors[0], seq);
  const std::string source = emit_cuda(*k, "lm_kernel");
  EXPECT_NE(source.find("lm_floordiv_inv("), std::string::npos) << source;
  HostCompilerOptions options;
  options.flags = {"-O1", "-fPIC", "-shared", "-std=c++20", "-pthread", "-w"};
  HostCompiler compiler(options);
  auto lib = compiler.compile(std::string(kShim) + source + R"(
extern "C" long long lm_test_divide(long long a, long long d, unsigned long long m, int mod) {
  const lm_divisor v = {d, m};
  return mod ? lm_floormod_inv(a, v) : lm_floordiv_inv(a, v);
})");
  auto divide = lib->function<long long(long long, long long, unsigned long long, int)>("lm_test_divide");
  const size_t at = k->dim_names.size();
  std::mt19937_64 rng(7);
  const int64_t two31 = int64_t{1} << 31;
  for (int64_t d : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{5}, int64_t{7}, int64_t{37}, int64_t{100}, int64_t{641},
                    int64_t{4095}, int64_t{65537}, int64_t{1000003}, two31 - 1, two31, two31 + 1, int64_t{1} << 40}) {
    const DimMap dims{{"seq", d}};
    ASSERT_EQ(entries[at].eval(dims), d);
    const auto m = static_cast<unsigned long long>(entries[at + 1].eval(dims));
    EXPECT_EQ(m != 0, d <= two31) << "d=" << d;
    std::vector<int64_t> as = {0, 1, d - 1, d, d + 1, 2 * d - 1, 2 * d, two31 - 1, two31, two31 + 1,
                               two31 - d, -1, -d, -d - 1, int64_t{1} << 50, -(int64_t{1} << 50)};
    for (int i = 0; i < 2000; ++i) as.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(two31)));
    for (int i = 0; i < 200; ++i) as.push_back(static_cast<int64_t>(rng() >> 20) - (int64_t{1} << 43));
    for (int64_t a : as) {
      int64_t q = a / d, r = a % d;
      if (r != 0 && (r < 0) != (d < 0)) --q, r += d;
      ASSERT_EQ(divide(a, d, m, 0), q) << a << " / " << d;
      ASSERT_EQ(divide(a, d, m, 1), r) << a << " % " << d;
    }
  }
}

}  // namespace
}  // namespace luminal::kernel::testing
