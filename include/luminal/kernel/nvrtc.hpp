// NVRTC loaded at run time (dlopen), so nothing links against the CUDA toolkit and a
// machine without it still builds and runs everything else.
#pragma once

#include <string>
#include <vector>

namespace luminal::kernel::nvrtc {

// True when libnvrtc could be loaded (tried once; libnvrtc.so.13, libnvrtc.so, then
// the same names under /usr/local/cuda/lib64).
bool available();
// Why it could not be loaded (empty when available).
std::string load_error();
// "major.minor" of the loaded NVRTC.
std::string version();

// Compile CUDA C source for `arch` (e.g. "sm_90") and return the CUBIN. A compile error
// throws luminal::Error with NVRTC's log and the first lines of the source.
std::string compile(const std::string& source, const std::string& name, const std::string& arch = "sm_90",
                    const std::vector<std::string>& extra_options = {});

}  // namespace luminal::kernel::nvrtc
