#include "luminal/kernel/host_compiler.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "luminal/error.hpp"
#include "luminal/program_cache.hpp"

extern char** environ;

namespace luminal::kernel {
namespace {

// Two independent 64-bit FNV-1a hashes: 128 bits, so collisions are not a concern.

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

std::string first_lines(const std::string& text, int n) {
  std::string out;
  size_t pos = 0;
  for (int i = 0; i < n && pos < text.size(); ++i) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    out += std::to_string(i + 1) + ": " + text.substr(pos, end - pos) + "\n";
    pos = end + 1;
  }
  return out;
}

std::string unique_suffix() {
  std::ostringstream os;
  os << getpid() << "." << std::hash<std::thread::id>{}(std::this_thread::get_id());
  return os.str();
}

// What else decides the binary: the compiler's version line and, for -march=native, the
// CPU's feature flags (a cache directory shared by two machines must not mix them).
std::string toolchain_identity(const std::string& compiler, bool native) {
  static std::mutex mutex;
  static std::map<std::string, std::string> known;
  std::lock_guard lock(mutex);
  std::string& id = known[compiler + (native ? "+native" : "")];
  if (!id.empty()) return id;
  if (FILE* p = popen(("'" + compiler + "' --version 2>/dev/null").c_str(), "r")) {
    char line[512] = {0};
    if (std::fgets(line, sizeof line, p)) id = line;
    pclose(p);
  }
  if (native) {
    std::ifstream cpu("/proc/cpuinfo");
    for (std::string line; std::getline(cpu, line);)
      if (line.rfind("flags", 0) == 0) {
        id += line;
        break;
      }
  }
  if (id.empty()) id = "unknown";
  return id;
}

}  // namespace

SharedLibrary::~SharedLibrary() {
  if (handle_) dlclose(handle_);
}

void* SharedLibrary::symbol(std::string_view name) const {
  dlerror();
  void* p = dlsym(handle_, std::string(name).c_str());
  LUMINAL_CHECK(p != nullptr, "shared library ", path_.string(), " has no symbol '", name, "'");
  return p;
}

std::filesystem::path HostCompiler::default_cache_dir() {
  if (const char* dir = std::getenv("LUMINAL_CACHE_DIR"); dir && *dir) return dir;
  const char* home = std::getenv("HOME");
  return std::filesystem::path(home && *home ? home : "/tmp") / ".cache" / "luminal" / "kernels";
}

HostCompiler::HostCompiler(HostCompilerOptions options) : options_(std::move(options)) {
  cache_dir_ = options_.cache_dir.empty() ? default_cache_dir() : options_.cache_dir;
  bool native = std::find(options_.flags.begin(), options_.flags.end(), "-march=native") != options_.flags.end();
  identity_ = toolchain_identity(options_.compiler, native);
  std::error_code ec;
  std::filesystem::create_directories(cache_dir_, ec);
  LUMINAL_CHECK(!ec, "kernel cache directory ", cache_dir_.string(), " cannot be created: ", ec.message());
}

std::string HostCompiler::key(const std::string& source) const {
  std::string all = options_.compiler + '\x1f' + identity_;
  for (const auto& f : options_.flags) all += '\x1f' + f;
  all += '\x1e';
  all += source;
  return content_hash(all);
}

std::filesystem::path HostCompiler::build(const std::string& source, const std::string& key) {
  std::filesystem::path so = cache_dir_ / (key + ".so");
  if (std::filesystem::exists(so)) return so;
  const std::string tmp = key + ".tmp." + unique_suffix();
  std::filesystem::path src = cache_dir_ / (tmp + ".cpp"), obj = cache_dir_ / (tmp + ".so"),
                        log = cache_dir_ / (tmp + ".log");
  {
    std::ofstream f(src, std::ios::binary);
    f << source;
    LUMINAL_CHECK(f.good(), "cannot write kernel source ", src.string());
  }
  std::vector<std::string> args = {options_.compiler};
  args.insert(args.end(), options_.flags.begin(), options_.flags.end());
  args.insert(args.end(), {"-o", obj.string(), src.string()});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, options_.compiler.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  invocations_++;
  int status = 0;
  if (rc == 0) waitpid(pid, &status, 0);
  std::string message = rc != 0 ? "cannot run '" + options_.compiler + "'" : read_file(log);
  std::error_code ec;
  std::filesystem::remove(src, ec);
  std::filesystem::remove(log, ec);
  if (rc != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::filesystem::remove(obj, ec);
    fail("host compiler failed (", options_.compiler, ", exit ", WIFEXITED(status) ? WEXITSTATUS(status) : -1,
         "):\n", message, "--- source (first 30 lines) ---\n", first_lines(source, 30));
  }
  std::filesystem::rename(obj, so, ec);  // atomic: a concurrent writer of the same key wrote the same bytes
  LUMINAL_CHECK(!ec, "cannot move ", obj.string(), " to ", so.string(), ": ", ec.message());
  return so;
}

std::shared_ptr<const SharedLibrary> HostCompiler::load_cached(const std::string& k) {
  {
    std::lock_guard lock(mutex_);
    if (auto it = loaded_.find(k); it != loaded_.end()) return it->second;
  }
  std::filesystem::path so = cache_dir_ / (k + ".so");
  if (!std::filesystem::exists(so)) return nullptr;
  void* handle = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return nullptr;  // truncated or foreign: rebuilt by compile()
  auto lib = std::make_shared<const SharedLibrary>(handle, so);
  std::lock_guard lock(mutex_);
  return loaded_.emplace(k, std::move(lib)).first->second;
}

std::shared_ptr<const SharedLibrary> HostCompiler::compile(const std::string& source) {
  const std::string k = key(source);
  {
    std::lock_guard lock(mutex_);
    if (auto it = loaded_.find(k); it != loaded_.end()) return it->second;
  }
  std::filesystem::path so = build(source, k);
  void* handle = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  LUMINAL_CHECK(handle != nullptr, "cannot load compiled kernel ", so.string(), ": ", dlerror());
  auto lib = std::make_shared<const SharedLibrary>(handle, so);
  std::lock_guard lock(mutex_);
  return loaded_.emplace(k, std::move(lib)).first->second;
}

std::vector<std::shared_ptr<const SharedLibrary>> HostCompiler::compile_batch(const std::vector<std::string>& sources) {
  std::vector<std::shared_ptr<const SharedLibrary>> out(sources.size());
  std::vector<std::exception_ptr> errors(sources.size());
  std::atomic<size_t> next{0};
  size_t threads = std::min<size_t>({sources.size(), 4, std::max(1u, std::thread::hardware_concurrency())});
  auto work = [&] {
    for (size_t i; (i = next++) < sources.size();) {
      try {
        out[i] = compile(sources[i]);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return out;
}

}  // namespace luminal::kernel
