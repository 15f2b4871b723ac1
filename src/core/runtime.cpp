#include "luminal/runtime.hpp"

#include <chrono>

#include "luminal/error.hpp"
#include "luminal/safetensors.hpp"

namespace luminal {

void Runtime::load_plans(std::vector<Plan> plans, uint64_t source_graph_uid) {
  LUMINAL_ASSERT(!plans.empty(), "no plans");
  source_uid_ = source_graph_uid;
  plans_ = std::move(plans);
  active_plan_ = 0;
  load(plans_[0].program, plans_[0].external_ids);
}

void Runtime::execute(const DimMap& dims) {
  if (plans_.size() > 1) {
    int match = -1;
    for (size_t p = 0; p < plans_.size() && match < 0; ++p) {
      bool ok = true;
      for (const auto& [dim, range] : plans_[p].ranges) {
        auto it = dims.find(dim);
        LUMINAL_CHECK(it != dims.end(), "execute: dimension '", dim, "' has no value");
        ok = ok && it->second >= range.first && it->second <= range.second;
      }
      if (ok) match = static_cast<int>(p);
    }
    if (match < 0) {
      std::string values;
      for (const auto& [dim, range] : plans_[0].ranges) values += " " + dim + "=" + std::to_string(dims.at(dim));
      fail("execute: no dim bucket holds", values, "; compile with buckets that cover it");
    }
    if (match != active_plan_) {
      // Switch plans, carrying every input that holds data (weights, caches, fresh inputs).
      std::vector<std::pair<NodeId, HostTensor>> carried;
      const Plan& old = plans_[active_plan_];
      for (NodeId i = 0; i < old.program.size(); ++i) {
        const Node& n = old.program.node(i);
        NodeId ext = old.external_ids[i];
        if (n.op == OpKind::Input && ext != kNoNode && has_tensor(ext)) carried.emplace_back(ext, get_tensor(ext));
      }
      active_plan_ = match;
      load(plans_[match].program, plans_[match].external_ids);
      for (auto& [ext, t] : carried) set_tensor(ext, std::move(t));
    }
  }
  run(dims);
}

ProfileResult Runtime::profile(const DimMap& dims, int trials, std::chrono::duration<double> timeout) {
  using clock = std::chrono::steady_clock;
  ProfileResult r;
  double best = 1e300;
  auto start = clock::now();
  for (int t = 0; t < std::max(trials, 1); ++t) {
    auto t0 = clock::now();
    run(dims);
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
void Runtime::check_graph(const GraphTensor& t) const {
  LUMINAL_CHECK(source_uid_ == 0 || t.graph().uid() == source_uid_,
                "tensor ", t.id(), " belongs to a different graph than the one this runtime was compiled from");
}

void Runtime::set_data(const GraphTensor& t, HostTensor data) {
  check_graph(t);
  LUMINAL_CHECK(t.graph().node(t.id()).op == OpKind::Input, "set_data: tensor ", t.id(), " is a ",
                op_name(t.graph().node(t.id()).op), ", not an input");
  // Only a static shape can be checked now; symbolic ones are checked at execute.
  auto n = t.numel().as_constant();
  if (n) LUMINAL_CHECK(static_cast<int64_t>(data.numel()) == *n, "set_data: tensor '",
                       t.graph().node(t.id()).label, "' of shape ", to_string(t.shape()), " needs ", *n,
                       " elements, got ", data.numel());
  set_tensor(t.id(), data.cast(t.dtype()));
}

std::vector<bool> Runtime::get_bool(const GraphTensor& t) const {
  auto v = get(t).to_i64();
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
