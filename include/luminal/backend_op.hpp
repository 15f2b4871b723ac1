// A backend op: an operation a backend's rule file declares and puts into the e-graph
// next to the primitive subgraph it implements (docs/BACKENDS.md). Extraction turns the
// chosen e-node into a program Node with op == OpKind::BackendOp whose `backend` field
// holds this call; only the backend whose rules proposed it ever receives it.
//
// Declaration convention, checked when the rule file loads (hlir_egraph.cpp):
//   (constructor Name (String ExprList <attribute sorts...> <inputs>) IR :cost c)
//   attributes: i64, f64, String (also dtypes), Expr, ExprList, in any number and order;
//   inputs: (IR ExprList) pairs, each an input with the view it is read through, or a
//   single IList (ICons/INil) for a variable number of inputs.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "luminal/dtype.hpp"
#include "luminal/expression.hpp"

namespace luminal {

using BackendAttr = std::variant<int64_t, double, std::string, Expression, std::vector<Expression>>;

struct BackendOpCall {
  std::string name;                // the constructor's name in the rule file
  std::vector<BackendAttr> attrs;  // in declaration order

  // Typed access; a wrong index or kind is a broken invariant of the backend's own rules.
  int64_t i64(size_t k) const;
  double f64(size_t k) const;
  const std::string& str(size_t k) const;
  DType dtype(size_t k) const;     // a String attribute naming a dtype ("F32")
  const Expression& expr(size_t k) const;
  const std::vector<Expression>& exprs(size_t k) const;
  std::string to_string() const;   // "Name(3, 2.5, \"F32\", [a, 4])"
  friend bool operator==(const BackendOpCall&, const BackendOpCall&) = default;
};

}  // namespace luminal
