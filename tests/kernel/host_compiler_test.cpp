// The host compiler's caches (memory, then disk), batch compilation, error messages,
// and NVRTC's own error path.
#include <filesystem>

#include "harness.hpp"

namespace luminal::kernel::testing {
namespace {

std::filesystem::path fresh_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("luminal_kernel_cache_test_" + name + "_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  return dir;
}

std::string adder(int k) {
  return "extern \"C\" int add_k(int x) { return x + " + std::to_string(k) + "; }\n";
}

TEST(HostCompiler, MemoryThenDiskCache) {
  HostCompilerOptions options;
  options.cache_dir = fresh_dir("cache");
  HostCompiler first(options);
  auto lib = first.compile(adder(3));
  EXPECT_EQ(lib->function<int(int)>("add_k")(4), 7);
  EXPECT_EQ(first.compiler_invocations(), 1);
  EXPECT_EQ(first.compile(adder(3)).get(), lib.get());  // memory hit: the same loaded library
  EXPECT_EQ(first.compiler_invocations(), 1);
  EXPECT_TRUE(std::filesystem::exists(options.cache_dir / (first.key(adder(3)) + ".so")));

  HostCompiler second(options);  // a fresh object: disk hit
  EXPECT_EQ(second.compile(adder(3))->function<int(int)>("add_k")(-10), -7);
  EXPECT_EQ(second.compiler_invocations(), 0);
  second.compile(adder(4));
  EXPECT_EQ(second.compiler_invocations(), 1);

  // The key covers the flags: other flags, another binary.
  HostCompilerOptions o2 = options;
  o2.flags.push_back("-DLUMINAL_SOMETHING=1");
  HostCompiler third(o2);
  EXPECT_NE(third.key(adder(3)), first.key(adder(3)));
  third.compile(adder(3));
  EXPECT_EQ(third.compiler_invocations(), 1);
  // No temporary files are left behind.
  for (const auto& e : std::filesystem::directory_iterator(options.cache_dir))
    EXPECT_EQ(e.path().extension(), ".so") << e.path();
  std::filesystem::remove_all(options.cache_dir);
}

TEST(HostCompiler, BatchCompilesInParallelAndKeepsOrder) {
  HostCompilerOptions options;
  options.cache_dir = fresh_dir("batch");
  HostCompiler c(options);
  std::vector<std::string> sources;
  for (int k = 0; k < 5; ++k) sources.push_back(adder(k * 10));
  sources.push_back(adder(0));  // a duplicate
  auto libs = c.compile_batch(sources);
  ASSERT_EQ(libs.size(), sources.size());
  for (int k = 0; k < 5; ++k) EXPECT_EQ(libs[k]->function<int(int)>("add_k")(1), 1 + k * 10);
  EXPECT_EQ(libs[5]->function<int(int)>("add_k")(1), 1);
  EXPECT_LE(c.compiler_invocations(), 6);
  EXPECT_GE(c.compiler_invocations(), 5);
  std::filesystem::remove_all(options.cache_dir);
}

TEST(HostCompiler, ErrorsNameTheProblem) {
  HostCompilerOptions options;
  options.cache_dir = fresh_dir("errors");
  HostCompiler c(options);
  try {
    c.compile("extern \"C\" int broken( { return 0; }\n");
    FAIL() << "expected a compile error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("host compiler failed"), std::string::npos) << m;
    EXPECT_NE(m.find("1: extern \"C\" int broken("), std::string::npos) << m;  // the source's first lines
  }
  auto lib = c.compile(adder(1));
  EXPECT_THROW(lib->symbol("no_such_symbol"), Error);
  HostCompilerOptions bad = options;
  bad.compiler = "/nonexistent/compiler";
  EXPECT_THROW(HostCompiler(bad).compile(adder(2)), Error);
  std::filesystem::remove_all(options.cache_dir);
}

TEST(Nvrtc, LoadsAndReportsCompileErrors) {
  if (!nvrtc::available()) {
    if (nvrtc_required()) FAIL() << "NVRTC cannot be loaded (" << nvrtc::load_error() << "); set LUMINAL_ALLOW_NO_NVRTC=1 to skip";
    GTEST_SKIP() << nvrtc::load_error();
  }
  EXPECT_FALSE(nvrtc::version().empty());
  std::string cubin = nvrtc::compile("extern \"C\" __global__ void f(float* x) { x[threadIdx.x] *= 2.0f; }\n", "f");
  EXPECT_GT(cubin.size(), 0u);
  try {
    nvrtc::compile("extern \"C\" __global__ void g(float* x) { x[0] = undefined_name; }\n", "g");
    FAIL() << "expected a compile error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("undefined_name"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace luminal::kernel::testing
