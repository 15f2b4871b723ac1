// Stands in for src/core/compile.cpp in fuzz builds: clang 14 (Debian 12's) cannot compile
// that file (a lambda capturing a structured binding, a C++20 feature of clang 16), and
// the fuzzed parsers never compile a graph.
#include "luminal/compile.hpp"
#include "luminal/error.hpp"
#include "luminal/graph.hpp"

namespace luminal {
void Graph::compile_into(Runtime&, const CompileOptions&) const { fail("compile is not built into fuzz targets"); }
std::string CompileReport::to_string() const { return "compile is not built into fuzz targets"; }
}  // namespace luminal
