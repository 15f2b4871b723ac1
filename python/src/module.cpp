// luminal._luminal: the C++ core as a Python module. The public package is python/luminal.
#include "bindings.hpp"

NB_MODULE(_luminal, m) {
  namespace py = luminal::python;
  m.doc() = "luminal: a search-based deep-learning compiler (C++ core bindings)";
  // luminal::Error (bad user input) surfaces as luminal.Error, a ValueError.
  static nanobind::exception<luminal::Error> error(m, "Error", PyExc_ValueError);
  py::register_builtin_runtimes();
  py::bind_expression(m);
  py::bind_graph(m);
  py::bind_tensor(m);
  py::bind_runtime(m);
#ifdef LUMINAL_HAVE_MODELS  // python/CMakeLists.txt: models are optional
  py::bind_models(m);
#endif
}
