// Compiled C++ kernels by region text, for backends that run regions on the host: each
// region is lowered, emitted and compiled once per process (the host compiler also caches
// it on disk). A batch compiles 16 kernels per translation unit, units in parallel.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "luminal/kernel/host_compiler.hpp"
#include "luminal/kernel/kernel.hpp"

namespace luminal::kernel {

class CppKernelCache {
 public:
  using Entry = void (*)(void* const* buffers, const int64_t* dims, int64_t begin, int64_t end);
  struct Compiled {
    Kernel kernel;
    std::shared_ptr<const SharedLibrary> library;
    Entry entry = nullptr;
  };

  // Compile every region not compiled yet (a region that cannot be lowered is an Error).
  void compile(const std::vector<std::string>& regions);
  // The compiled kernel of a region, compiling it now if needed.
  std::shared_ptr<const Compiled> get(const std::string& region);
  int compiler_invocations() const { return compiler_.compiler_invocations(); }

 private:
  std::shared_ptr<Compiled> from_index(const std::string& region);
  void write_index(const std::string& region, const std::string& lib_key);
  std::mutex mutex_;
  HostCompiler compiler_;
  std::unordered_map<std::string, std::shared_ptr<const Compiled>> kernels_;
};

}  // namespace luminal::kernel
