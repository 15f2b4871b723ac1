// Every kernel source compiles with NVRTC for sm_90, with no GPU needed. NVRTC missing is
// a failure (CI must compile the kernels) unless LUMINAL_ALLOW_NO_NVRTC=1.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "luminal/error.hpp"
#include "luminal_cuda/compiler.hpp"
#include "luminal_cuda/kernels.hpp"

using namespace luminal::cuda;
namespace fs = std::filesystem;

namespace {
bool nvrtc_present() {
  if (api::nvrtc_table().error.empty()) return true;
  const char* allow = std::getenv("LUMINAL_ALLOW_NO_NVRTC");
  if (allow && std::string(allow) == "1") return false;
  ADD_FAILURE() << "NVRTC cannot be loaded (" << api::nvrtc_table().error
                << "); set LUMINAL_ALLOW_NO_NVRTC=1 to skip on machines without the CUDA toolkit";
  return false;
}
#define LUMINAL_REQUIRE_NVRTC()                                      \
  do {                                                               \
    if (!nvrtc_present()) GTEST_SKIP() << "skipped: no NVRTC";       \
  } while (0)

bool is_elf(const std::string& image) { return image.size() > 4 && image.compare(0, 4, "\x7f" "ELF") == 0; }

fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("luminal_cuda_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}
}  // namespace

TEST(CudaNvrtc, EveryKernelSourceCompilesForSm90) {
  LUMINAL_REQUIRE_NVRTC();
  ModuleCache cache("sm_90", /*disk_dir=*/{});
  const std::vector<KernelSource> sources = all_kernel_sources();
  ASSERT_FALSE(sources.empty());
  const auto start = std::chrono::steady_clock::now();
  const auto images = cache.cubins(sources);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(images.size(), sources.size());
  for (size_t i = 0; i < images.size(); ++i) EXPECT_TRUE(is_elf(*images[i])) << sources[i].name;
  std::printf("compiled %zu kernel modules for sm_90 in %.1f s\n", sources.size(), seconds);
}

TEST(CudaNvrtc, LauncherVariantsCompile) {
  LUMINAL_REQUIRE_NVRTC();
  // The exact sources the launchers build (one entry each), a few of them.
  ModuleCache cache("sm_90", {});
  std::vector<KernelSource> sources{gemv_source(luminal::DType::BF16, 1, 1, Activation::None, 8),
                                    gemv_source(luminal::DType::F16, 16, 2, Activation::Silu),
                                    gemv_source(luminal::DType::F32, 4, 2, Activation::GeluTanh),
                                    gemv_group_source(luminal::DType::BF16, 1, 2, 2),
                                    gemv_group_source(luminal::DType::F32, 16, 4, 4, luminal::DType::BF16),
                                    small_matmul_source(luminal::DType::F32), small_matmul_source(luminal::DType::BF16),
                                    small_matmul_source(luminal::DType::F16)};
  for (const auto& image : cache.cubins(sources)) EXPECT_TRUE(is_elf(*image));
}

TEST(CudaNvrtc, CacheHitsMemoryThenDisk) {
  LUMINAL_REQUIRE_NVRTC();
  const fs::path dir = fresh_dir("cache");
  KernelSource source{"tiny", "extern \"C\" __global__ void tiny(float* p) { p[threadIdx.x] *= -2.0f; }\n", {}};
  {
    ModuleCache cache("sm_90", dir);
    const auto first = cache.cubin(source);
    const auto second = cache.cubin(source);
    EXPECT_EQ(first, second);
    EXPECT_EQ(cache.stats().compiled, 1);
    EXPECT_EQ(cache.stats().memory_hits, 1);
  }
  EXPECT_TRUE(fs::exists(dir / (cache_key(source, "sm_90") + ".cubin")));
  {
    ModuleCache cache("sm_90", dir);
    EXPECT_TRUE(is_elf(*cache.cubin(source)));
    EXPECT_EQ(cache.stats().disk_hits, 1);
    EXPECT_EQ(cache.stats().compiled, 0);
  }
  // Another arch or option set is another key.
  KernelSource with_option = source;
  with_option.options.push_back("-DLUMINAL_UNUSED=1");
  EXPECT_NE(cache_key(source, "sm_90"), cache_key(source, "sm_80"));
  EXPECT_NE(cache_key(source, "sm_90"), cache_key(with_option, "sm_90"));
  // A corrupted cache file is ignored and rewritten, not trusted.
  {
    std::ofstream(dir / (cache_key(source, "sm_90") + ".cubin"), std::ios::binary) << "garbage";
    ModuleCache cache("sm_90", dir);
    EXPECT_TRUE(is_elf(*cache.cubin(source)));
    EXPECT_EQ(cache.stats().compiled, 1);
  }
  fs::remove_all(dir);
}

// Generated kernels are grouped into units by whichever are new to a process, so another
// process (the profiling worker, a warm compile) forms other units of the same kernels.
// Each kernel is found by its own key, whatever unit compiled it: a warm compile of the 8B
// model had recompiled every kernel in regrouped units (2 s of its 2.06 s).
TEST(CudaNvrtc, KernelsAreFoundWhateverUnitCompiledThem) {
  LUMINAL_REQUIRE_NVRTC();
  const fs::path dir = fresh_dir("units");
  auto kernel = [](int i) {
    const std::string name = "k" + std::to_string(i);
    return KernelSource{name,
                        "extern \"C\" __global__ void " + name + "(float* p) { p[threadIdx.x] *= " +
                            std::to_string(i + 2) + ".0f; }\n",
                        {"-DLUMINAL_TEST_UNITS=1"}};
  };
  std::vector<std::string> first_units;
  {
    ModuleCache cache("sm_90", dir);
    first_units = cache.compile_kernels({kernel(0), kernel(1), kernel(2), kernel(3), kernel(4)}, 2, /*threads=*/1);
    ASSERT_EQ(first_units.size(), 5u);
    EXPECT_EQ(cache.stats().compiled, 3);  // units {0,1} {2,3} {4}
    EXPECT_EQ(first_units[0], first_units[1]);
    EXPECT_NE(first_units[1], first_units[2]);
    EXPECT_EQ(first_units[2], first_units[3]);
    // In the same process: all found, nothing compiled, and a new kernel gets a unit of its own.
    auto again = cache.compile_kernels({kernel(3), kernel(5), kernel(0)}, 2, 1);
    EXPECT_EQ(again[0], first_units[3]);
    EXPECT_EQ(again[2], first_units[0]);
    EXPECT_EQ(cache.stats().compiled, 4);
    EXPECT_EQ(cache.stats().kernels_found, 2);
  }
  {
    // Another process, other groupings: every kernel comes from the disk.
    ModuleCache cache("sm_90", dir);
    auto units = cache.compile_kernels({kernel(4), kernel(1), kernel(3), kernel(5)}, 8);
    EXPECT_EQ(cache.stats().compiled, 0);
    EXPECT_EQ(cache.stats().kernels_found, 4);
    EXPECT_EQ(units[0], first_units[4]);
    EXPECT_EQ(units[1], first_units[1]);
  }
  {
    // An index whose unit's CUBIN was pruned is not trusted: the kernel compiles again.
    fs::remove(dir / (first_units[0] + ".cubin"));
    ModuleCache cache("sm_90", dir);
    auto units = cache.compile_kernels({kernel(0), kernel(2)}, 8);
    EXPECT_EQ(cache.stats().compiled, 1);
    EXPECT_EQ(cache.stats().kernels_found, 1);
    EXPECT_NE(units[0], first_units[0]);
    EXPECT_EQ(units[1], first_units[2]);
    EXPECT_TRUE(is_elf(*cache.cubin(KernelSource{"k0", kernel(0).code + "\n", kernel(0).options})));
  }
  {
    // A unit that fails leaves its kernels without a unit (compiled alone by the caller);
    // the other units are kept.
    ModuleCache cache("sm_90", dir);
    KernelSource broken{"broken", "extern \"C\" __global__ void broken(float* p) { p[0] = nope; }\n",
                        kernel(0).options};
    auto units = cache.compile_kernels({kernel(6), broken, kernel(7), kernel(8)}, 2, 1);
    EXPECT_TRUE(units[0].empty());
    EXPECT_TRUE(units[1].empty());
    EXPECT_FALSE(units[2].empty());
    EXPECT_EQ(units[2], units[3]);
  }
  {
    // Few new kernels and many threads: a unit each, compiled side by side.
    ModuleCache cache("sm_90", {});
    auto units = cache.compile_kernels({kernel(10), kernel(11), kernel(12)}, 8, /*threads=*/4);
    EXPECT_EQ(cache.stats().compiled, 3);
    EXPECT_NE(units[0], units[1]);
    EXPECT_NE(units[1], units[2]);
    // Many: four threads, eight kernels, two to a unit.
    std::vector<KernelSource> eight;
    for (int i = 20; i < 28; ++i) eight.push_back(kernel(i));
    units = cache.compile_kernels(eight, 8, 4);
    EXPECT_EQ(cache.stats().compiled, 3 + 4);
    EXPECT_EQ(units[0], units[1]);
    EXPECT_NE(units[1], units[2]);
  }
  fs::remove_all(dir);
}

TEST(CudaNvrtc, CompileErrorsCarryTheLog) {
  LUMINAL_REQUIRE_NVRTC();
  KernelSource broken{"broken_kernel", "extern \"C\" __global__ void k(float* p) { p[0] = undeclared_name; }\n", {}};
  try {
    compile_cubin(broken, "sm_90");
    FAIL() << "a broken kernel compiled";
  } catch (const luminal::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("broken_kernel"), std::string::npos) << what;
    EXPECT_NE(what.find("undeclared_name"), std::string::npos) << what;
    EXPECT_NE(what.find("sm_90"), std::string::npos) << what;
  }
  // In a batch, the failure surfaces after the good sources compile.
  ModuleCache cache("sm_90", {});
  KernelSource good{"good", "extern \"C\" __global__ void g(int* p) { p[0] = -1; }\n", {}};
  EXPECT_THROW(cache.cubins({good, broken}), luminal::Error);
  EXPECT_EQ(cache.stats().compiled, 1);
}

TEST(CudaNvrtc, RejectsMalformedArch) { EXPECT_THROW(ModuleCache("90", {}), luminal::Error); }
