#include "luminal/egraph/extract.hpp"

#include <algorithm>
#include <limits>

#include "luminal/error.hpp"

namespace luminal::egraph {

static constexpr double kInf = std::numeric_limits<double>::infinity();

double ast_size(const EGraph& g, NodeId n, std::span<const double> child_costs) {
  double c = g.op(g.node(n).op).cost;
  for (double x : child_costs) c += x;
  return c;
}

double ast_depth(const EGraph& g, NodeId n, std::span<const double> child_costs) {
  double c = 0;
  for (double x : child_costs) c = std::max(c, x);
  return c + g.op(g.node(n).op).cost;
}

Extractor::Extractor(const EGraph& g, CostFn cost_fn) : g_(g) {
  std::vector<ClassId> classes = g.classes();
  size_t n = classes.empty() ? 0 : classes.back() + 1;
  cost_.assign(n, kInf);
  best_.assign(n, kInvalid);
  std::vector<std::vector<NodeId>> nodes(n);
  for (ClassId c : classes) nodes[c] = g.class_nodes(c);
  std::vector<double> child_costs;
  for (bool changed = true; changed;) {
    changed = false;
    for (ClassId c : classes) {
      for (NodeId node : nodes[c]) {
        if (g.op(g.node(node).op).unextractable) continue;
        child_costs.clear();
        bool ready = true;
        for (ClassId ch : g.children(node)) {
          double x = cost_[g.find(ch)];
          if (x == kInf) { ready = false; break; }
          child_costs.push_back(x);
        }
        if (!ready) continue;
        double x = cost_fn(g, node, child_costs);
        if (x < cost_[c]) {
          cost_[c] = x;
          best_[c] = node;
          changed = true;
        }
      }
    }
  }
}

double Extractor::cost(ClassId c) const {
  c = g_.find(c);
  return c < cost_.size() ? cost_[c] : kInf;
}

std::optional<NodeId> Extractor::best_node(ClassId c) const {
  c = g_.find(c);
  if (c >= best_.size() || best_[c] == kInvalid) return std::nullopt;
  return best_[c];
}

ExtractedTerm Extractor::best_term(ClassId root) const {
  ExtractedTerm term;
  std::vector<uint32_t> index(best_.size(), kInvalid);
  std::vector<uint8_t> on_stack(best_.size(), 0);
  // Iterative post-order DFS over chosen nodes; on_stack detects cycles.
  std::vector<std::pair<ClassId, bool>> stack{{g_.find(root), false}};
  while (!stack.empty()) {
    auto [c, expanded] = stack.back();
    stack.pop_back();
    if (index[c] != kInvalid) continue;
    LUMINAL_CHECK(best_[c] != kInvalid, "extract: e-class e", c, " has no finite-cost term");
    NodeId node = best_[c];
    if (!expanded) {
      LUMINAL_CHECK(!on_stack[c], "extract: cycle through e-class e", c,
                    " (the cost function must not make a node cheaper than its children)");
      on_stack[c] = 1;
      stack.push_back({c, true});
      for (ClassId ch : g_.children(node))
        if (index[g_.find(ch)] == kInvalid) stack.push_back({g_.find(ch), false});
      continue;
    }
    on_stack[c] = 0;
    ExtractedTerm::Node tn{node, {}};
    for (ClassId ch : g_.children(node)) tn.children.push_back(index[g_.find(ch)]);
    index[c] = static_cast<uint32_t>(term.nodes.size());
    term.nodes.push_back(std::move(tn));
  }
  return term;
}

std::string ExtractedTerm::to_string(const EGraph& g) const {
  std::vector<std::string> text(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    NodeId n = nodes[i].enode;
    const OpInfo& info = g.op(g.node(n).op);
    std::string s = "(";
    s += info.name;
    for (size_t a = 0; a < info.args.size(); ++a) {
      s += ' ';
      if (g.arg_is_payload(g.node(n).op, a)) s += g.node_arg(n, a).to_string();
      else s += text[nodes[i].children[info.slot[a]]];
    }
    s += ')';
    text[i] = std::move(s);
  }
  return text.empty() ? std::string() : text.back();
}

}  // namespace luminal::egraph
