#include "luminal/runtime.hpp"

#include <chrono>

#include "luminal/error.hpp"
#include "luminal/safetensors.hpp"

namespace luminal {

ProfileResult Runtime::profile(const DimMap& dims, int trials, std::chrono::duration<double> timeout) {
  using clock = std::chrono::steady_clock;
  ProfileResult r;
  double best = 1e300;
  auto start = clock::now();
  for (int t = 0; t < std::max(trials, 1); ++t) {
    auto t0 = clock::now();
    execute(dims);
    best = std::min(best, std::chrono::duration<double>(clock::now() - t0).count());
    if (clock::now() - start > timeout) {
      r.timed_out = true;
      break;
    }
  }
  r.seconds = best;
  return r;
}

void Runtime::set_data(const GraphTensor& t, const std::vector<float>& v) {
  set_data(t, HostTensor::from<float>(v, t.dtype()));
}
void Runtime::set_data(const GraphTensor& t, const std::vector<double>& v) {
  set_data(t, HostTensor::from<double>(v, t.dtype()));
}
void Runtime::set_data(const GraphTensor& t, const std::vector<int32_t>& v) {
  set_data(t, HostTensor::from<int32_t>(v, t.dtype()));
}
void Runtime::set_data(const GraphTensor& t, const std::vector<int64_t>& v) {
  set_data(t, HostTensor::from<int64_t>(v, t.dtype()));
}
void Runtime::set_data(const GraphTensor& t, HostTensor data) {
  LUMINAL_CHECK(t.graph().node(t.id()).op == OpKind::Input, "set_data: tensor ", t.id(), " is a ",
                op_name(t.graph().node(t.id()).op), ", not an input");
  auto n = t.numel().try_eval(t.graph().dim_map());
  if (n) LUMINAL_CHECK(static_cast<int64_t>(data.numel()) == *n, "set_data: tensor '",
                       t.graph().node(t.id()).label, "' of shape ", to_string(t.shape()), " needs ", *n,
                       " elements, got ", data.numel());
  set_tensor(t.id(), data.cast(t.dtype()));
}

std::vector<bool> Runtime::get_bool(const GraphTensor& t) const {
  auto v = get_tensor(t.id()).to_i64();
  return std::vector<bool>(v.begin(), v.end());
}

std::vector<std::string> Runtime::load_safetensors(const Graph& graph, const std::string& path, bool allow_missing) {
  SafetensorsFile file = SafetensorsFile::open(path);
  std::vector<std::string> loaded;
  for (NodeId id : graph.inputs()) {
    const Node& n = graph.node(id);
    if (!file.contains(n.label)) {
      LUMINAL_CHECK(allow_missing, "load_safetensors: tensor '", n.label,
                    "' not found in '", path, "'");
      continue;
    }
    const auto& e = file.entry(n.label);
    std::vector<int64_t> want;
    for (const auto& d : n.shape) {
      auto v = d.try_eval(graph.dim_map());
      LUMINAL_CHECK(v.has_value(), "load_safetensors: tensor '", n.label, "' has symbolic shape ",
                    to_string(n.shape), "; set its dims before loading");
      want.push_back(*v);
    }
    LUMINAL_CHECK(want == e.shape, "load_safetensors: tensor '", n.label, "' in '", path, "' has shape ",
                  to_string(Shape(e.shape.begin(), e.shape.end())), " but the graph expects ", to_string(n.shape));
    set_tensor(id, file.read(n.label).cast(n.dtype));
    loaded.push_back(n.label);
  }
  return loaded;
}

}  // namespace luminal
