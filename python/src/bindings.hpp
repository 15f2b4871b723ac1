// Shared pieces of the nanobind module `luminal._luminal`.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nanobind/nanobind.h>

#include "luminal/luminal.hpp"

namespace luminal::python {

namespace nb = nanobind;
using namespace nanobind::literals;

// A compiled runtime as Python sees it: the runtime plus the dims of its last execute,
// which give shapes to the flat buffers runtimes hand back.
struct PyRuntime {
  std::unique_ptr<Runtime> runtime;
  std::string kind;    // registry name, e.g. "reference"
  std::string device;  // "cpu" or "cuda": where its buffers live
  DimMap last_dims;
  uint64_t graph_uid = 0;
  CompileReport report;
};

// Runtimes by name, so a new backend plugs in with one registration line
// (python/src/runtimes.cpp) and no binding changes.
struct RuntimeEntry {
  std::string name, device, description;
  std::function<std::unique_ptr<Runtime>()> make;
};
std::vector<RuntimeEntry>& runtime_registry();
const RuntimeEntry& find_runtime(const std::string& name);
void register_builtin_runtimes();

// Compile `g` into a fresh runtime of the registered kind `runtime`.
std::unique_ptr<PyRuntime> compile_graph(const Graph& g, const std::string& runtime,
                                         const std::optional<CompileOptions>& options);

// Every GraphTensor handed to Python keeps its Graph alive (tensors hold a raw pointer).
struct TiesToGraph {
  static void precall(PyObject**, size_t, nb::detail::cleanup_list*) {}
  static void postcall(PyObject** args, size_t nargs, nb::handle ret);
};

void bind_expression(nb::module_& m);
void bind_graph(nb::module_& m);
void bind_tensor(nb::module_& m);
void bind_runtime(nb::module_& m);
void bind_models(nb::module_& m);

}  // namespace luminal::python
