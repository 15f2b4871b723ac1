#include "luminal_cuda/compiler.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "luminal/atomic_file.hpp"
#include "luminal/error.hpp"

namespace luminal::cuda {
namespace fs = std::filesystem;

fs::path default_cache_dir() {
  if (const char* dir = std::getenv("LUMINAL_CACHE_DIR"); dir && *dir) return fs::path(dir) / "cuda";
  if (const char* home = std::getenv("HOME"); home && *home) return fs::path(home) / ".cache" / "luminal" / "cuda";
  return {};
}

namespace {

// FNV-1a over 64 bits from two different offset bases: a 128-bit key whose collision
// chance is negligible for a kernel cache, with no dependency.
uint64_t fnv1a(const std::string& text, uint64_t hash) {
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  LUMINAL_NVRTC(nvrtcVersion, &major, &minor);
  return std::to_string(major) + "." + std::to_string(minor);
}

// NVRTC ships cuda_fp16.h/cuda_bf16.h in recent versions, but older ones need the
// toolkit's include folder; adding it when it exists is harmless either way.
std::vector<std::string> include_options() {
  std::vector<std::string> options;
  for (const char* var : {"CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"}) {
    if (const char* root = std::getenv(var); root && *root && fs::exists(fs::path(root) / "include" / "cuda_bf16.h"))
      options.push_back("-I" + (fs::path(root) / "include").string());
  }
  if (fs::exists("/usr/local/cuda/include/cuda_bf16.h")) options.push_back("-I/usr/local/cuda/include");
  return options;
}

std::vector<std::string> full_options(const KernelSource& source, const std::string& arch) {
  std::vector<std::string> options{"--gpu-architecture=" + arch, "-std=c++17"};
  for (const std::string& o : include_options()) options.push_back(o);
  for (const std::string& o : source.options) options.push_back(o);
  return options;
}

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : " ") + p;
  return out;
}

}  // namespace

std::string cache_key(const KernelSource& source, const std::string& arch) {
  std::string text = source.code;
  text += '\0' + arch + '\0' + nvrtc_version();
  for (const std::string& o : source.options) text += '\0' + o;
  char hex[33];
  std::snprintf(hex, sizeof(hex), "%016llx%016llx",
                static_cast<unsigned long long>(fnv1a(text, 0xcbf29ce484222325ull)),
                static_cast<unsigned long long>(fnv1a(text, 0x84222325cbf29ce4ull)));
  return hex;
}

std::string compile_cubin(const KernelSource& source, const std::string& arch) {
  const api::NvrtcTable& nvrtc = api::nvrtc();
  const std::vector<std::string> options = full_options(source, arch);
  std::vector<const char*> option_ptrs;
  for (const std::string& o : options) option_ptrs.push_back(o.c_str());

  api::nvrtcProgram program = nullptr;
  const std::string file_name = source.name + ".cu";
  LUMINAL_NVRTC(nvrtcCreateProgram, &program, source.code.c_str(), file_name.c_str(), 0, nullptr, nullptr);
  struct Destroy {
    api::nvrtcProgram* p;
    ~Destroy() { api::nvrtc_table().nvrtcDestroyProgram(p); }
  } destroy{&program};

  const api::nvrtcResult result =
      nvrtc.nvrtcCompileProgram(program, static_cast<int>(option_ptrs.size()), option_ptrs.data());
  if (result != api::NVRTC_SUCCESS) {
    size_t log_size = 0;
    std::string log;
    if (nvrtc.nvrtcGetProgramLogSize(program, &log_size) == api::NVRTC_SUCCESS && log_size > 1) {
      log.resize(log_size);
      nvrtc.nvrtcGetProgramLog(program, log.data());
      log.resize(log_size - 1);
    }
    fail("NVRTC could not compile kernel '", source.name, "' for ", arch, ": ", nvrtc.nvrtcGetErrorString(result),
         "\noptions: ", join(options), "\nlog:\n", log);
  }
  size_t size = 0;
  LUMINAL_NVRTC(nvrtcGetCUBINSize, program, &size);
  std::string cubin(size, '\0');
  LUMINAL_NVRTC(nvrtcGetCUBIN, program, cubin.data());
  return cubin;
}

ModuleCache::ModuleCache(std::string arch, fs::path disk_dir) : arch_(std::move(arch)), disk_dir_(std::move(disk_dir)) {
  LUMINAL_CHECK(arch_.rfind("sm_", 0) == 0, "CUDA arch must look like sm_90, got '", arch_, "'");
}

ModuleCache::~ModuleCache() {
  // Modules belong to a context that may already be gone at exit; unloading is best effort.
  if (api::driver_table().error.empty())
    for (auto& [key, module] : modules_) api::driver_table().cuModuleUnload(module);
}

namespace {
std::string cubin_header(const std::string& key) { return "luminal-cubin-v1 " + key + "\n"; }
std::string index_header(const std::string& key) { return "luminal-kernel-unit-v1 " + key + "\n"; }

// A cache file's contents after its header, or nothing when it is missing, truncated or
// foreign: such a file is ignored (and rewritten), never trusted.
std::optional<std::string> read_cache_file(const fs::path& file, const std::string& header) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream contents;
  contents << in.rdbuf();
  std::string data = contents.str();
  if (data.size() <= header.size() || data.compare(0, header.size(), header) != 0) return std::nullopt;
  return data.substr(header.size());
}
}  // namespace

std::shared_ptr<const std::string> ModuleCache::read_cubin(const std::string& key) const {
  if (disk_dir_.empty()) return nullptr;
  auto data = read_cache_file(disk_dir_ / (key + ".cubin"), cubin_header(key));
  return data ? std::make_shared<const std::string>(std::move(*data)) : nullptr;
}

void ModuleCache::write_file(const std::string& name, const std::string& contents) const {
  if (disk_dir_.empty()) return;
  write_file_atomically(disk_dir_ / name, contents);  // a cache that cannot be written is not an error
}

std::shared_ptr<const std::string> ModuleCache::cubin(const KernelSource& source) {
  const std::string key = cache_key(source, arch_);
  {
    std::lock_guard lock(mutex_);
    if (auto it = cubins_.find(key); it != cubins_.end()) {
      ++stats_.memory_hits;
      return it->second;
    }
  }
  std::shared_ptr<const std::string> result = read_cubin(key);
  const bool from_disk = result != nullptr;
  if (!result) {
    // LUMINAL_KERNEL_DUMP=DIR (as for the CPU backend's kernels): each compiled source, for diagnosis.
    if (const char* dir = std::getenv("LUMINAL_KERNEL_DUMP"); dir && *dir)
      std::ofstream(fs::path(dir) / (source.name + "-" + key + ".cu")) << source.code;
    result = std::make_shared<const std::string>(compile_cubin(source, arch_));
    write_file(key + ".cubin", cubin_header(key) + *result);
  }
  std::lock_guard lock(mutex_);
  ++(from_disk ? stats_.disk_hits : stats_.compiled);
  return cubins_.emplace(key, result).first->second;
}

std::string ModuleCache::unit_of(const std::string& kernel_key) {
  {
    std::lock_guard lock(mutex_);
    if (auto it = unit_of_.find(kernel_key); it != unit_of_.end()) return it->second;
  }
  if (disk_dir_.empty()) return {};
  auto unit = read_cache_file(disk_dir_ / (kernel_key + ".unit"), index_header(kernel_key));
  // The index is trusted only with its unit's CUBIN beside it (a cache directory may be
  // pruned file by file).
  if (!unit || unit->size() != kernel_key.size() || !fs::exists(disk_dir_ / (*unit + ".cubin"))) return {};
  std::lock_guard lock(mutex_);
  unit_of_[kernel_key] = *unit;
  return *unit;
}

void ModuleCache::remember_unit(const std::string& kernel_key, const std::string& unit_key) {
  {
    std::lock_guard lock(mutex_);
    if (auto it = unit_of_.find(kernel_key); it != unit_of_.end() && it->second == unit_key) return;
    unit_of_[kernel_key] = unit_key;
  }
  write_file(kernel_key + ".unit", index_header(kernel_key) + unit_key);
}

std::vector<std::string> ModuleCache::compile_kernels(const std::vector<KernelSource>& kernels, size_t per_unit,
                                                      unsigned threads) {
  LUMINAL_ASSERT(per_unit > 0, "compile_kernels: units of no kernels");
  std::vector<std::string> unit_keys(kernels.size());
  std::vector<std::string> kernel_keys(kernels.size());
  std::vector<size_t> missing;
  for (size_t i = 0; i < kernels.size(); ++i) {
    kernel_keys[i] = cache_key(kernels[i], arch_);
    unit_keys[i] = unit_of(kernel_keys[i]);
    if (unit_keys[i].empty()) missing.push_back(i);
  }
  {
    std::lock_guard lock(mutex_);
    stats_.kernels_found += static_cast<int>(kernels.size() - missing.size());
  }
  // The new kernels, per_unit at a time, or fewer where that leaves threads idle: a search
  // generation brings a few new kernels, and one unit of them compiles on one thread
  // while the rest wait (NVRTC's fixed cost for a generated kernel is ~50 ms, its
  // optimisation 0.1-0.7 s). Kernels of different options never share a unit.
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  per_unit = std::clamp<size_t>((missing.size() + threads - 1) / threads, 1, per_unit);
  std::vector<KernelSource> units;
  std::vector<std::vector<size_t>> members;
  std::map<std::vector<std::string>, size_t> open_unit;  // options -> the unit being filled
  for (size_t i : missing) {
    auto it = open_unit.find(kernels[i].options);
    if (it == open_unit.end() || members[it->second].size() >= per_unit) {
      units.push_back(KernelSource{kernels[i].name, {}, kernels[i].options});
      members.emplace_back();
      it = open_unit.insert_or_assign(kernels[i].options, units.size() - 1).first;
    }
    units[it->second].code += kernels[i].code;
    units[it->second].code += "\n";
    members[it->second].push_back(i);
  }
  if (units.empty()) return unit_keys;
  try {
    cubins(units, threads);
  } catch (...) {
    // Which unit failed is found below: its kernels get no unit.
  }
  for (size_t u = 0; u < units.size(); ++u) {
    const std::string key = cache_key(units[u], arch_);
    {
      std::lock_guard lock(mutex_);
      if (!cubins_.count(key)) continue;  // failed
    }
    for (size_t i : members[u]) {
      unit_keys[i] = key;
      remember_unit(kernel_keys[i], key);
    }
  }
  return unit_keys;
}

std::vector<std::shared_ptr<const std::string>> ModuleCache::cubins(const std::vector<KernelSource>& sources,
                                                                    unsigned threads) {
  std::vector<std::shared_ptr<const std::string>> results(sources.size());
  std::vector<std::exception_ptr> errors(sources.size());
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = std::min<unsigned>(threads, static_cast<unsigned>(sources.size()));
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < sources.size(); i = next++) {
      try {
        results[i] = cubin(sources[i]);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  return results;
}

api::CUfunction ModuleCache::function(const KernelSource& source, const std::string& kernel_name) {
  const std::string key = cache_key(source, arch_);
  {
    std::lock_guard lock(mutex_);
    if (auto it = functions_.find({key, kernel_name}); it != functions_.end()) return it->second;
  }
  cubin(source);  // compiled (or read) and kept in memory under its key
  return function(key, kernel_name);
}

api::CUfunction ModuleCache::function(const std::string& unit_key, const std::string& kernel_name) {
  {
    std::lock_guard lock(mutex_);
    if (auto it = functions_.find({unit_key, kernel_name}); it != functions_.end()) return it->second;
  }
  std::shared_ptr<const std::string> image;
  {
    std::lock_guard lock(mutex_);
    if (auto it = cubins_.find(unit_key); it != cubins_.end()) image = it->second;
  }
  if (!image) {
    image = read_cubin(unit_key);
    LUMINAL_CHECK(image != nullptr, "kernel '", kernel_name, "': compiled unit ", unit_key,
                  " is neither in memory nor in the disk cache");
    std::lock_guard lock(mutex_);
    ++stats_.disk_hits;
    image = cubins_.emplace(unit_key, image).first->second;
  }
  std::lock_guard lock(mutex_);
  api::CUmodule& module = modules_[unit_key];
  if (!module) LUMINAL_CU(cuModuleLoadData, &module, image->data());
  api::CUfunction fn = nullptr;
  const api::CUresult r = api::driver().cuModuleGetFunction(&fn, module, kernel_name.c_str());
  LUMINAL_CHECK(r == api::CUDA_SUCCESS, "kernel '", kernel_name, "' not found in compiled unit ", unit_key);
  functions_[{unit_key, kernel_name}] = fn;
  return fn;
}

ModuleCache::Stats ModuleCache::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace luminal::cuda
