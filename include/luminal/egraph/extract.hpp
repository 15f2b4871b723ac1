// Bottom-up minimum-cost extraction (egg's Extractor). The cost of a node is computed
// from its children's best costs; classes are relaxed to a fixpoint, and a class only
// takes a node whose children already have a finite cost, with strict improvement.
// For costs where a node never costs less than any child (AST size, AST depth,
// op costs >= 0) the chosen nodes are acyclic; a cycle is reported as an error.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "luminal/egraph/egraph.hpp"

namespace luminal::egraph {

// child_costs[i] is the best cost of the i-th child class.
using CostFn = std::function<double(const EGraph&, NodeId, std::span<const double> child_costs)>;

// Constructor :cost (default 1) plus the children: the size of the tree.
double ast_size(const EGraph& g, NodeId n, std::span<const double> child_costs);
double ast_depth(const EGraph& g, NodeId n, std::span<const double> child_costs);

// An extracted term as a DAG: nodes[i].children index `nodes`, children before parents;
// the root is nodes.back(). Shared subterms appear once.
struct ExtractedTerm {
  struct Node {
    NodeId enode;                      // the e-node chosen
    std::vector<uint32_t> children;    // indices into `nodes`
  };
  std::vector<Node> nodes;
  std::string to_string(const EGraph& g) const;  // "(Mul (Var \"a\") (Num 2))"
};

class Extractor {
 public:
  explicit Extractor(const EGraph& g, CostFn cost = ast_size);
  double cost(ClassId c) const;                 // +inf when the class has no finite term
  std::optional<NodeId> best_node(ClassId c) const;
  ExtractedTerm best_term(ClassId c) const;     // throws luminal::Error if none
  std::string best_string(ClassId c) const { return best_term(c).to_string(g_); }

 private:
  const EGraph& g_;
  std::vector<double> cost_;   // by canonical class id
  std::vector<NodeId> best_;
};

}  // namespace luminal::egraph
