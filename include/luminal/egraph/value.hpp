// Payload values carried by e-nodes, function tables and rule variables.
//
// A Value is 16 bytes: a kind tag plus 64 bits. Strings, Expressions and lists of
// Expressions are interned in process-wide tables, so == and hash are O(1) for every
// kind. An e-class reference is also a Value (kind Class), which lets function tables
// and rule environments treat classes and primitives uniformly.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <functional>

#include "luminal/expression.hpp"

namespace luminal::egraph {

using ClassId = uint32_t;

enum class ValueKind : uint8_t { None, Class, I64, F64, Bool, String, Expr, ExprList };
const char* value_kind_name(ValueKind kind);

class Value {
 public:
  Value() = default;  // None: "no value"
  static Value cls(ClassId id) { return Value(ValueKind::Class, id); }
  static Value i64(int64_t v) { return Value(ValueKind::I64, static_cast<uint64_t>(v)); }
  static Value f64(double v);
  static Value boolean(bool v) { return Value(ValueKind::Bool, v ? 1 : 0); }
  static Value string(std::string_view s);
  static Value expr(const Expression& e);
  static Value expr_list(std::span<const Expression> xs);

  ValueKind kind() const { return kind_; }
  bool is_none() const { return kind_ == ValueKind::None; }
  ClassId as_class() const { return static_cast<ClassId>(bits_); }
  int64_t as_i64() const { return static_cast<int64_t>(bits_); }
  double as_f64() const;
  bool as_bool() const { return bits_ != 0; }
  const std::string& as_string() const;
  const Expression& as_expr() const;
  std::span<const Expression> as_expr_list() const;
  uint64_t bits() const { return bits_; }
  static Value from_bits(ValueKind k, uint64_t bits) { return Value(k, bits); }  // with bits()

  // Readable form: 3, 2.5, "s", true, e7 (class), expressions via the printer hook.
  std::string to_string() const;

  friend bool operator==(const Value& a, const Value& b) { return a.kind_ == b.kind_ && a.bits_ == b.bits_; }
  size_t hash() const { return (bits_ * 0x9E3779B97F4A7C15ull) ^ (static_cast<uint64_t>(kind_) << 59); }

 private:
  Value(ValueKind k, uint64_t bits) : kind_(k), bits_(bits) {}
  ValueKind kind_ = ValueKind::None;
  uint64_t bits_ = 0;
};

// Deterministic total order used for :merge min/max and canonical dumps: numeric for
// numbers, lexicographic for strings, intern order for Expressions and classes.
bool value_less(const Value& a, const Value& b);

// How Expression payloads are printed in dumps and extracted terms (default:
// Expression::to_string()). Pass an empty function to restore the default.
void set_expression_printer(std::function<std::string(const Expression&)> printer);

}  // namespace luminal::egraph

template <>
struct std::hash<luminal::egraph::Value> {
  size_t operator()(const luminal::egraph::Value& v) const noexcept { return v.hash(); }
};
