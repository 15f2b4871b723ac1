// Compiles C++ source to a shared object with the system compiler and loads it.
//
// Cached in memory and on disk ($LUMINAL_CACHE_DIR, default ~/.cache/luminal/kernels),
// keyed by a hash of source + compiler (path and version) + flags. Files are written under a temporary
// name and renamed, so concurrent processes sharing the directory are safe.
#pragma once

#include <atomic>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace luminal::kernel {

// A loaded shared object; dlclose'd when the last reference goes.
class SharedLibrary {
 public:
  SharedLibrary(void* handle, std::filesystem::path path) : handle_(handle), path_(std::move(path)) {}
  ~SharedLibrary();
  SharedLibrary(const SharedLibrary&) = delete;
  SharedLibrary& operator=(const SharedLibrary&) = delete;
  // The address of `name`; throws luminal::Error when the library lacks it.
  void* symbol(std::string_view name) const;
  template <class Fn>
  Fn* function(std::string_view name) const {
    return reinterpret_cast<Fn*>(symbol(name));
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  void* handle_;
  std::filesystem::path path_;
};

struct HostCompilerOptions {
  std::string compiler = "c++";
  // The one place the flags live.
  // -fopenmp-simd: the emitted `#pragma omp simd` loops (no OpenMP runtime); -fno-trapping-math
  // lets guarded float operations be if-converted (no value changes: nothing reads FP traps).
  // -fno-unswitch-loops: GCC unswitched row loops on the branches inside the floor
  // division helpers of index arithmetic, which left attention's causally masked softmax
  // scalar (1.0 ms instead of 0.32 ms for (4, 4, 128, 128) on one core; no change measured
  // on softmax, norms or GELU).
  // -mprefer-vector-width=512: GCC's -march=native picks 256-bit vectors on many AVX-512
  // CPUs (this machine: rocketlake); with 512 the exact GELU went 0.064 -> 0.048 ms and
  // softmax 0.082 -> 0.066 ms on (64, 4096). No effect where the CPU lacks AVX-512.
  std::vector<std::string> flags = {"-O3", "-march=native", "-fPIC", "-shared", "-std=c++17", "-ffp-contract=off",
                                    "-fno-math-errno", "-fno-trapping-math", "-fno-unswitch-loops", "-fopenmp-simd",
#if defined(__x86_64__) || defined(__i386__)
                                    "-mprefer-vector-width=512",  // an x86 option: other compilers reject it
#endif
                                    "-w"};
  std::filesystem::path cache_dir;  // empty: $LUMINAL_CACHE_DIR or ~/.cache/luminal/kernels
};

class HostCompiler {
 public:
  explicit HostCompiler(HostCompilerOptions options = {});

  // Compile (or find in a cache) and load. A compile error throws luminal::Error with
  // the compiler's message and the first lines of the source.
  std::shared_ptr<const SharedLibrary> compile(const std::string& source);
  // The same for many sources, compiled in parallel by a few threads.
  std::vector<std::shared_ptr<const SharedLibrary>> compile_batch(const std::vector<std::string>& sources);

  // The cache key: a hex hash of source + compiler (path and version) + flags (+ the CPU's
  // feature flags under -march=native).
  std::string key(const std::string& source) const;
  // The library compiled earlier under `key` (this process or the disk cache); nullptr
  // when there is none.
  std::shared_ptr<const SharedLibrary> load_cached(const std::string& key);
  const std::filesystem::path& cache_dir() const { return cache_dir_; }
  // How many times this object ran the compiler (cache misses).
  int compiler_invocations() const { return invocations_.load(); }
  static std::filesystem::path default_cache_dir();

 private:
  std::filesystem::path build(const std::string& source, const std::string& key);
  HostCompilerOptions options_;
  std::string identity_;  // compiler version (and CPU flags under -march=native)
  std::filesystem::path cache_dir_;
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const SharedLibrary>> loaded_;
  std::atomic<int> invocations_{0};
};

}  // namespace luminal::kernel
