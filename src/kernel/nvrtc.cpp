#include "luminal/kernel/nvrtc.hpp"

#include <dlfcn.h>

#include <mutex>

#include "luminal/error.hpp"

namespace luminal::kernel::nvrtc {
namespace {

using Program = void*;
// The subset of the NVRTC C API we use (types as in nvrtc.h; nvrtcResult is an int enum).
struct Api {
  const char* (*get_error_string)(int) = nullptr;
  int (*version)(int*, int*) = nullptr;
  int (*create_program)(Program*, const char*, const char*, int, const char* const*, const char* const*) = nullptr;
  int (*destroy_program)(Program*) = nullptr;
  int (*compile_program)(Program, int, const char* const*) = nullptr;
  int (*get_log_size)(Program, size_t*) = nullptr;
  int (*get_log)(Program, char*) = nullptr;
  int (*get_cubin_size)(Program, size_t*) = nullptr;
  int (*get_cubin)(Program, char*) = nullptr;
  std::string error;
  bool ok = false;
};

const Api& api() {
  static Api a;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = nullptr;
    for (const char* name : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", "/usr/local/cuda/lib64/libnvrtc.so.13",
                             "/usr/local/cuda/lib64/libnvrtc.so"}) {
      if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
    }
    if (!lib) {
      const char* e = dlerror();
      a.error = std::string("cannot load libnvrtc: ") + (e ? e : "not found");
      return;
    }
    auto get = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (!fn && a.error.empty()) a.error = std::string("libnvrtc lacks ") + name;
    };
    get(a.get_error_string, "nvrtcGetErrorString");
    get(a.version, "nvrtcVersion");
    get(a.create_program, "nvrtcCreateProgram");
    get(a.destroy_program, "nvrtcDestroyProgram");
    get(a.compile_program, "nvrtcCompileProgram");
    get(a.get_log_size, "nvrtcGetProgramLogSize");
    get(a.get_log, "nvrtcGetProgramLog");
    get(a.get_cubin_size, "nvrtcGetCUBINSize");
    get(a.get_cubin, "nvrtcGetCUBIN");
    a.ok = a.error.empty();
  });
  return a;
}

const Api& loaded() {
  const Api& a = api();
  LUMINAL_CHECK(a.ok, a.error);
  return a;
}

void check(const Api& a, int rc, const char* what) {
  LUMINAL_CHECK(rc == 0, what, " failed: ", a.get_error_string(rc));
}

}  // namespace

bool available() { return api().ok; }
std::string load_error() { return api().error; }

std::string version() {
  const Api& a = loaded();
  int major = 0, minor = 0;
  check(a, a.version(&major, &minor), "nvrtcVersion");
  return std::to_string(major) + "." + std::to_string(minor);
}

std::string compile(const std::string& source, const std::string& name, const std::string& arch,
                    const std::vector<std::string>& extra_options) {
  const Api& a = loaded();
  Program prog = nullptr;
  check(a, a.create_program(&prog, source.c_str(), (name + ".cu").c_str(), 0, nullptr, nullptr), "nvrtcCreateProgram");
  std::vector<std::string> opts = {"--gpu-architecture=" + arch, "-std=c++17"};
  opts.insert(opts.end(), extra_options.begin(), extra_options.end());
  std::vector<const char*> argv;
  for (const auto& o : opts) argv.push_back(o.c_str());
  int rc = a.compile_program(prog, static_cast<int>(argv.size()), argv.data());
  size_t log_size = 0;
  a.get_log_size(prog, &log_size);
  std::string log(log_size, '\0');
  if (log_size) a.get_log(prog, log.data());
  std::string cubin;
  if (rc == 0) {
    size_t n = 0;
    check(a, a.get_cubin_size(prog, &n), "nvrtcGetCUBINSize");
    cubin.resize(n);
    check(a, a.get_cubin(prog, cubin.data()), "nvrtcGetCUBIN");
  }
  a.destroy_program(&prog);
  if (rc != 0) {
    std::string head;
    size_t pos = 0;
    for (int i = 1; i <= 30 && pos < source.size(); ++i) {
      size_t end = source.find('\n', pos);
      if (end == std::string::npos) end = source.size();
      head += std::to_string(i) + ": " + source.substr(pos, end - pos) + "\n";
      pos = end + 1;
    }
    fail("NVRTC failed to compile ", name, " for ", arch, " (", a.get_error_string(rc), "):\n", log,
         "--- source (first 30 lines) ---\n", head);
  }
  return cubin;
}

}  // namespace luminal::kernel::nvrtc
