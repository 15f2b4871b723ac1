// CUDA C to CUBIN through NVRTC, cached in memory and on disk, compiled in parallel.
// Compiling needs NVRTC only, never a GPU: tests compile every kernel for sm_90 here.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "luminal_cuda/api.hpp"

namespace luminal::cuda {

struct KernelSource {
  std::string name;                  // for logs and errors ("gemv_bf16_m1")
  std::string code;                  // complete translation unit
  std::vector<std::string> options;  // extra NVRTC options (arch and -std are added)
};

// $LUMINAL_CACHE_DIR/cuda when set, else ~/.cache/luminal/cuda ($HOME unset: no disk cache).
std::filesystem::path default_cache_dir();

// One NVRTC compilation to CUBIN for `arch` ("sm_90"). Throws luminal::Error with the
// kernel name, the options and NVRTC's log when compilation fails.
std::string compile_cubin(const KernelSource& source, const std::string& arch);

// The cache key: a 128-bit hash of source, arch, options and the NVRTC version, as hex.
std::string cache_key(const KernelSource& source, const std::string& arch);

class ModuleCache {
 public:
  // An empty `disk_dir` keeps the cache in memory only.
  explicit ModuleCache(std::string arch, std::filesystem::path disk_dir = default_cache_dir());
  ~ModuleCache();
  ModuleCache(const ModuleCache&) = delete;
  ModuleCache& operator=(const ModuleCache&) = delete;

  const std::string& arch() const { return arch_; }

  // The CUBIN for a source: memory, then disk, then NVRTC. Thread-safe.
  std::shared_ptr<const std::string> cubin(const KernelSource& source);
  // Many at once, compiled in parallel threads; the first failure is rethrown after all
  // threads finish. Results are in the order of `sources`.
  std::vector<std::shared_ptr<const std::string>> cubins(const std::vector<KernelSource>& sources,
                                                         unsigned threads = 0);

  // Many generated kernels, each a source of its own (`name` is its function's name),
  // compiled `per_unit` to a translation unit so NVRTC's fixed cost is shared. A kernel
  // compiled before in any unit, by this process or another through the disk, is found by
  // its own key and not compiled again: units are made of whichever kernels are new, so
  // another process (the profiling worker, a second compile) would otherwise form other
  // units of the same kernels and miss the disk. Units shrink below `per_unit` where
  // full units would leave some of `threads` (0: one per core) idle. Returns, per kernel,
  // the cache key of the unit that holds it, or "" where its unit failed to compile (the
  // caller compiles that kernel alone, so the error names it).
  std::vector<std::string> compile_kernels(const std::vector<KernelSource>& kernels, size_t per_unit,
                                           unsigned threads = 0);

  // Load (once) and return a kernel of a compiled source. Needs a current context.
  api::CUfunction function(const KernelSource& source, const std::string& kernel_name);
  // The same from a unit's cache key (compile_kernels' answer): its CUBIN must be in
  // memory or on disk. Throws luminal::Error when it is not.
  api::CUfunction function(const std::string& unit_key, const std::string& kernel_name);

  struct Stats {
    int memory_hits = 0, disk_hits = 0, compiled = 0;
    int kernels_found = 0;  // compile_kernels: kernels found in an earlier unit
  };
  Stats stats() const;

 private:
  std::string arch_;
  std::filesystem::path disk_dir_;
  mutable std::mutex mutex_;
  std::shared_ptr<const std::string> read_cubin(const std::string& key) const;  // from disk, validated
  std::string unit_of(const std::string& kernel_key);                          // "" when unknown
  void remember_unit(const std::string& kernel_key, const std::string& unit_key);
  void write_file(const std::string& name, const std::string& contents) const;

  std::map<std::string, std::shared_ptr<const std::string>> cubins_;
  std::map<std::string, std::string> unit_of_;  // kernel key -> the key of the unit holding it
  std::map<std::string, api::CUmodule> modules_;
  std::map<std::pair<std::string, std::string>, api::CUfunction> functions_;
  Stats stats_;
};

}  // namespace luminal::cuda
