#include "luminal/atomic_file.hpp"
#include "luminal/kernel/kernel_cache.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <unistd.h>

#include "luminal/error.hpp"
#include "luminal/program_cache.hpp"

namespace luminal::kernel {
namespace {
std::string entry_name(const std::string& region) {
  std::string name = "lk";  // (not "lk" + ...: GCC 12 warns falsely on that concatenation)
  name += std::to_string(std::hash<std::string>{}(region));
  return name;
}

// Kernels are compiled 16 to a translation unit, so the unit a kernel lands in depends on
// its batch. A small index file per region (key: region, compiler, flags and the build of
// this library) names the unit's library, so a later process finds the kernel whatever
// batch compiled it.
std::filesystem::path index_path(const HostCompiler& compiler, const std::string& region) {
  std::string salted = "region-index\x1f";
  salted += build_identity();
  salted += '\x1e';
  salted += region;
  return compiler.cache_dir() / (compiler.key(salted) + ".idx");
}
}  // namespace

std::shared_ptr<CppKernelCache::Compiled> CppKernelCache::from_index(const std::string& region) {
  std::ifstream f(index_path(compiler_, region));
  std::string lib_key, entry;
  if (!(f >> lib_key >> entry) || entry != entry_name(region)) return nullptr;
  auto lib = compiler_.load_cached(lib_key);
  if (!lib) return nullptr;
  auto k = lower(parse_region(region));
  if (!k) return nullptr;
  auto c = std::make_shared<Compiled>();
  c->kernel = std::move(*k);
  c->library = std::move(lib);
  try {
    c->entry = c->library->function<void(void* const*, const int64_t*, int64_t, int64_t)>(entry);
  } catch (const Error&) {
    return nullptr;
  }
  return c;
}

void CppKernelCache::write_index(const std::string& region, const std::string& lib_key) {
  // Best effort: a miss only costs a compile.
  write_file_atomically(index_path(compiler_, region), lib_key + '\n' + entry_name(region) + '\n');
}

void CppKernelCache::compile(const std::vector<std::string>& wanted) {
  std::vector<std::string> regions;
  {
    std::lock_guard lock(mutex_);
    for (const auto& r : wanted)
      if (!kernels_.count(r) && std::find(regions.begin(), regions.end(), r) == regions.end()) regions.push_back(r);
  }
  // Kernels an earlier process compiled (in whatever batch) load from the disk cache.
  std::erase_if(regions, [&](const std::string& r) {
    auto c = from_index(r);
    if (!c) return false;
    std::lock_guard lock(mutex_);
    kernels_.emplace(r, std::move(c));
    return true;
  });
  if (regions.empty()) return;
  constexpr size_t kPerUnit = 16;
  std::vector<std::string> sources;
  std::vector<std::shared_ptr<Compiled>> compiled;
  for (size_t i = 0; i < regions.size(); ++i) {
    if (i % kPerUnit == 0) sources.emplace_back();
    auto c = std::make_shared<Compiled>();
    auto k = lower(parse_region(regions[i]));
    LUMINAL_CHECK(k.has_value(), "kernel cache: a region cannot be lowered to a kernel");
    c->kernel = std::move(*k);
    // LUMINAL_KERNEL_DUMP=DIR: each compiled region's text, IR and source, for diagnosis.
    if (const char* dir = std::getenv("LUMINAL_KERNEL_DUMP")) {
      const std::string base = std::string(dir) + "/" + entry_name(regions[i]);
      std::ofstream(base + ".region") << regions[i] << "\n";
      std::ofstream(base + ".ir") << to_string(c->kernel);
      std::ofstream(base + ".cpp") << emit_cpp(c->kernel, entry_name(regions[i]));
    }
    sources.back() += emit_cpp(c->kernel, entry_name(regions[i]));
    compiled.push_back(std::move(c));
  }
  auto libs = compiler_.compile_batch(sources);
  std::lock_guard lock(mutex_);
  for (size_t i = 0; i < regions.size(); ++i) {
    compiled[i]->library = libs[i / kPerUnit];
    compiled[i]->entry = compiled[i]->library->function<void(void* const*, const int64_t*, int64_t, int64_t)>(
        entry_name(regions[i]));
    kernels_.emplace(regions[i], compiled[i]);
    write_index(regions[i], compiler_.key(sources[i / kPerUnit]));
  }
}

std::shared_ptr<const CppKernelCache::Compiled> CppKernelCache::get(const std::string& region) {
  {
    std::lock_guard lock(mutex_);
    if (auto it = kernels_.find(region); it != kernels_.end()) return it->second;
  }
  compile({region});
  std::lock_guard lock(mutex_);
  return kernels_.at(region);
}

}  // namespace luminal::kernel
