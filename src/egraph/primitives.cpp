// The builtin primitives every engine knows: arithmetic, comparisons, logic, conversions.
#include <algorithm>
#include <cmath>

#include "luminal/egraph/egraph.hpp"
#include "luminal/error.hpp"

namespace luminal::egraph {

// ---------------------------------------------------------------- builtin primitives

void register_builtin_primitives(EGraph& g) {
  using Args = std::span<const Value>;
  auto numeric = [](const Value& v) {
    return v.kind() == ValueKind::I64 || v.kind() == ValueKind::F64;
  };
  auto as_double = [](const Value& v) {
    return v.kind() == ValueKind::I64 ? static_cast<double>(v.as_i64()) : v.as_f64();
  };
  // Binary arithmetic: i64 op i64 -> i64, anything with an f64 -> f64.
  auto arith = [&](const char* name, auto int_op, auto float_op) {
    g.register_primitive(name, [=](Args a) -> std::optional<Value> {
      if (a.size() != 2 || !numeric(a[0]) || !numeric(a[1])) return std::nullopt;
      if (a[0].kind() == ValueKind::I64 && a[1].kind() == ValueKind::I64)
        return int_op(a[0].as_i64(), a[1].as_i64());
      return float_op(as_double(a[0]), as_double(a[1]));
    });
  };
  using OptV = std::optional<Value>;
  arith("+", [](int64_t x, int64_t y) -> OptV { return Value::i64(x + y); },
        [](double x, double y) -> OptV { return Value::f64(x + y); });
  arith("-", [](int64_t x, int64_t y) -> OptV { return Value::i64(x - y); },
        [](double x, double y) -> OptV { return Value::f64(x - y); });
  arith("*", [](int64_t x, int64_t y) -> OptV { return Value::i64(x * y); },
        [](double x, double y) -> OptV { return Value::f64(x * y); });
  // Floor division and modulo, as luminal::Expression (the result of % has y's sign).
  arith("/", [](int64_t x, int64_t y) -> OptV {
          if (y == 0) return std::nullopt;
          int64_t q = x / y;
          return Value::i64((x % y != 0 && ((x < 0) != (y < 0))) ? q - 1 : q);
        },
        [](double x, double y) -> OptV { return y == 0 ? OptV() : Value::f64(x / y); });
  arith("%", [](int64_t x, int64_t y) -> OptV {
          if (y == 0) return std::nullopt;
          int64_t r = x % y;
          return Value::i64((r != 0 && ((r < 0) != (y < 0))) ? r + y : r);
        },
        [](double x, double y) -> OptV { return y == 0 ? OptV() : Value::f64(std::fmod(x, y)); });
  arith("min", [](int64_t x, int64_t y) -> OptV { return Value::i64(std::min(x, y)); },
        [](double x, double y) -> OptV { return Value::f64(std::min(x, y)); });
  arith("max", [](int64_t x, int64_t y) -> OptV { return Value::i64(std::max(x, y)); },
        [](double x, double y) -> OptV { return Value::f64(std::max(x, y)); });

  auto compare = [&](const char* name, auto cmp) {
    g.register_primitive(name, [=](Args a) -> std::optional<Value> {
      if (a.size() != 2) return std::nullopt;
      if (numeric(a[0]) && numeric(a[1])) {
        if (a[0].kind() == ValueKind::I64 && a[1].kind() == ValueKind::I64)
          return Value::boolean(cmp(a[0].as_i64(), a[1].as_i64()));
        return Value::boolean(cmp(as_double(a[0]), as_double(a[1])));
      }
      if (a[0].kind() == ValueKind::String && a[1].kind() == ValueKind::String)
        return Value::boolean(cmp(a[0].as_string(), a[1].as_string()));
      return std::nullopt;
    });
  };
  compare("<", [](const auto& x, const auto& y) { return x < y; });
  compare(">", [](const auto& x, const auto& y) { return x > y; });
  compare("<=", [](const auto& x, const auto& y) { return x <= y; });
  compare(">=", [](const auto& x, const auto& y) { return x >= y; });
  // Equality is identity of values, except that a constant Expression equals the i64
  // with its value, so `(= (expr-coeff ?s "z") 1)` reads naturally.
  auto same = [](const Value& x, const Value& y) {
    if (x.kind() == ValueKind::Expr && y.kind() == ValueKind::I64) return x.as_expr().as_constant() == y.as_i64();
    if (x.kind() == ValueKind::I64 && y.kind() == ValueKind::Expr) return y.as_expr().as_constant() == x.as_i64();
    return x == y;
  };
  g.register_primitive("=", [=](Args a) -> std::optional<Value> {
    if (a.size() != 2) return std::nullopt;
    return Value::boolean(same(a[0], a[1]));
  });
  g.register_primitive("!=", [=](Args a) -> std::optional<Value> {
    if (a.size() != 2) return std::nullopt;
    return Value::boolean(!same(a[0], a[1]));
  });
  g.register_primitive("and", [](Args a) -> std::optional<Value> {
    bool r = true;
    for (const Value& v : a) {
      if (v.kind() != ValueKind::Bool) return std::nullopt;
      r = r && v.as_bool();
    }
    return Value::boolean(r);
  });
  g.register_primitive("or", [](Args a) -> std::optional<Value> {
    bool r = false;
    for (const Value& v : a) {
      if (v.kind() != ValueKind::Bool) return std::nullopt;
      r = r || v.as_bool();
    }
    return Value::boolean(r);
  });
  g.register_primitive("not", [](Args a) -> std::optional<Value> {
    if (a.size() != 1 || a[0].kind() != ValueKind::Bool) return std::nullopt;
    return Value::boolean(!a[0].as_bool());
  });
  g.register_primitive("neg", [](Args a) -> std::optional<Value> {
    if (a.size() != 1) return std::nullopt;
    if (a[0].kind() == ValueKind::I64) return Value::i64(-a[0].as_i64());
    if (a[0].kind() == ValueKind::F64) return Value::f64(-a[0].as_f64());
    return std::nullopt;
  });
  g.register_primitive("to-f64", [=](Args a) -> std::optional<Value> {
    if (a.size() != 1 || !numeric(a[0])) return std::nullopt;
    return Value::f64(as_double(a[0]));
  });
  g.register_primitive("to-i64", [=](Args a) -> std::optional<Value> {
    if (a.size() != 1 || !numeric(a[0])) return std::nullopt;
    return Value::i64(static_cast<int64_t>(as_double(a[0])));
  });
}

}  // namespace luminal::egraph
