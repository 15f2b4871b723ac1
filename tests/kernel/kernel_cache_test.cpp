// The C++ kernel cache: a kernel compiled in one batch is found by a later cache (a later
// process) that asks for it alone, without running the compiler; results stay right.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "luminal/kernel/kernel.hpp"
#include "luminal/kernel/kernel_cache.hpp"

using namespace luminal;

namespace {

std::string unary_region(OpKind op, int64_t n) {
  Node proto;
  proto.op = op;
  proto.dtype = DType::F32;
  proto.shape = {n};
  kernel::FuseOperand in{nullptr, DType::F32, {n}, ShapeTracker::contiguous({n})};
  auto region = kernel::singleton(proto, std::span<const kernel::FuseOperand>(&in, 1));
  EXPECT_TRUE(region.has_value());
  return kernel::serialize(*region);
}

TEST(CppKernelCache, KernelsCompiledInABatchLoadAloneLater) {
  auto dir = std::filesystem::temp_directory_path() / ("luminal_kernel_cache_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  ::setenv("LUMINAL_CACHE_DIR", dir.c_str(), 1);
  std::string sin_region = unary_region(OpKind::Sin, 5), sqrt_region = unary_region(OpKind::Sqrt, 7),
              exp_region = unary_region(OpKind::Exp2, 9);
  {
    kernel::CppKernelCache first;
    first.compile({sin_region, sqrt_region, exp_region});
    EXPECT_EQ(first.compiler_invocations(), 1);  // one translation unit
  }
  kernel::CppKernelCache later;  // as a new process would
  auto k = later.get(sqrt_region);
  EXPECT_EQ(later.compiler_invocations(), 0);
  std::vector<float> x = {4.f, -1.f, 0.f, -0.f, INFINITY, 2.f, 9.f}, y(7, 123.f);
  int32_t error = 0;
  void* buffers[] = {x.data(), y.data(), &error};
  k->entry(buffers, nullptr, 0, k->kernel.extent.eval({}));
  EXPECT_EQ(error, 0);
  EXPECT_EQ(y[0], 2.f);
  EXPECT_TRUE(std::isnan(y[1]));
  EXPECT_EQ(y[2], 0.f);
  EXPECT_TRUE(std::signbit(y[3]));  // sqrt(-0) = -0
  EXPECT_EQ(y[4], INFINITY);
  EXPECT_EQ(y[6], 3.f);
  // A region never compiled still compiles.
  later.get(unary_region(OpKind::Recip, 3));
  EXPECT_EQ(later.compiler_invocations(), 1);
  ::unsetenv("LUMINAL_CACHE_DIR");
  std::filesystem::remove_all(dir);
}

}  // namespace
