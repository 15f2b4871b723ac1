// Symbolic integer expressions over named dimensions.
//
// An Expression is an immutable, hash-consed handle: building one canonicalises it,
// so two expressions that simplify to the same canonical form are the same pointer.
// Equality and hashing are O(1), which is what lets expressions be e-graph payloads.
//
// Semantics (documented in docs/EXPRESSIONS.md):
//   * all values are int64;
//   * `/` is floor division and `%` is floor modulo (the result has the sign of the
//     divisor), as in Python; division or modulo by zero evaluates to an error;
//   * comparisons and logical ops produce 0 or 1; `&&`/`||` treat nonzero as true;
//   * the variable named "z" (Expression::index()) is reserved: in a view it is the
//     index along one dimension, in an iota it is the element index.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace luminal {

// Values of dynamic dimensions at execute time, e.g. {{"seq", 17}}.
using DimMap = std::map<std::string, int64_t, std::less<>>;

enum class ExprKind : uint8_t {
  Num,  // integer constant
  Var,  // named variable
  Add, Mul, Div, Mod, Min, Max, CeilDiv,
  Lt, Eq, And, Or, Not,
};

struct ExprNode;  // interned; defined in src/core/expression.cpp

class Expression {
 public:
  Expression();                        // the constant 0
  Expression(int64_t value);           // NOLINT: implicit so shapes read {3, seq}
  Expression(int value) : Expression(static_cast<int64_t>(value)) {}  // NOLINT
  Expression(uint64_t value) : Expression(static_cast<int64_t>(value)) {}  // NOLINT

  static Expression var(std::string_view name);
  static Expression index();           // the reserved variable "z"
  static constexpr std::string_view kIndexName = "z";

  // Build a node WITHOUT simplifying (only for tests and deserialisation; the
  // operators below always canonicalise).
  static Expression raw(ExprKind kind, std::span<const Expression> children);
  // Canonicalise an expression built with raw().
  Expression simplify() const;

  ExprKind kind() const;
  std::span<const Expression> children() const;
  bool is_constant() const { return kind() == ExprKind::Num; }
  std::optional<int64_t> as_constant() const;
  int64_t constant_value() const;      // asserts is_constant()
  const std::string& var_name() const; // asserts kind() == Var

  // Evaluation: throws luminal::Error naming the variable when one is unbound.
  int64_t eval(const DimMap& dims) const;
  int64_t eval(const DimMap& dims, int64_t index_value) const;  // binds "z"
  std::optional<int64_t> try_eval(const DimMap& dims) const;

  Expression substitute(std::string_view name, const Expression& value) const;
  Expression substitute(const std::map<std::string, Expression, std::less<>>& values) const;
  bool depends_on(std::string_view name) const;
  std::vector<std::string> variables() const;  // sorted, unique

  // Facts the simplifier can prove (variables are assumed >= 0, "z" too).
  std::optional<int64_t> lower_bound() const;
  std::optional<int64_t> upper_bound() const;

  std::string to_string() const;       // readable infix, e.g. "(seq*4 + z)"
  // C/CUDA source: uses int64 arithmetic, floor semantics through helper macros
  // lm_floordiv/lm_floormod/lm_min/lm_max (see c_prelude()), or `>>` and `&` for a
  // constant power-of-two divisor; `var_name` maps variable names to C identifiers.
  // `divisor`, when given, may name a precomputed divisor for the divisor of a floor
  // division or modulo: a non-empty name N renders them as lm_floordiv_inv(a, N) and
  // lm_floormod_inv(a, N), helpers the caller defines (the CUDA emitter's invariant
  // divisors, docs/KERNEL_IR.md).
  std::string to_c(const std::function<std::string(const std::string&)>& var_name = {},
                   const std::function<std::string(const Expression&)>& divisor = {}) const;
  static std::string c_prelude();

  size_t hash() const;
  const ExprNode* node() const { return node_; }
  friend bool operator==(const Expression& a, const Expression& b) { return a.node_ == b.node_; }
  // Total order (stable across runs: structural, not by address).
  friend bool operator<(const Expression& a, const Expression& b);

 private:
  explicit Expression(const ExprNode* node) : node_(node) {}
  friend struct ExprInterner;
  const ExprNode* node_;
};

Expression operator+(const Expression& a, const Expression& b);
Expression operator-(const Expression& a, const Expression& b);
Expression operator-(const Expression& a);
Expression operator*(const Expression& a, const Expression& b);
Expression operator/(const Expression& a, const Expression& b);  // floor division
Expression operator%(const Expression& a, const Expression& b);  // floor modulo
Expression min(const Expression& a, const Expression& b);
Expression max(const Expression& a, const Expression& b);
Expression ceil_div(const Expression& a, const Expression& b);
Expression lt(const Expression& a, const Expression& b);
Expression le(const Expression& a, const Expression& b);
Expression gt(const Expression& a, const Expression& b);
Expression ge(const Expression& a, const Expression& b);
Expression eq(const Expression& a, const Expression& b);
Expression ne(const Expression& a, const Expression& b);
Expression logical_and(const Expression& a, const Expression& b);
Expression logical_or(const Expression& a, const Expression& b);
Expression logical_not(const Expression& a);

inline Expression& operator+=(Expression& a, const Expression& b) { return a = a + b; }
inline Expression& operator*=(Expression& a, const Expression& b) { return a = a * b; }

// Product of a list (1 for an empty list).
Expression product(std::span<const Expression> xs);

std::ostream& operator<<(std::ostream& os, const Expression& e);

}  // namespace luminal

template <>
struct std::hash<luminal::Expression> {
  size_t operator()(const luminal::Expression& e) const noexcept { return e.hash(); }
};
