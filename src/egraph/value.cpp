#include "luminal/egraph/value.hpp"

#include <bit>
#include <cstring>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "luminal/error.hpp"

namespace luminal::egraph {
namespace {

// Process-wide interners. Entries are never removed; deques keep references stable.
struct Interners {
  std::mutex mu;
  std::deque<std::string> strings;
  std::unordered_map<std::string_view, uint32_t> string_ids;
  std::deque<Expression> exprs;
  std::unordered_map<const ExprNode*, uint32_t> expr_ids;
  std::deque<std::vector<Expression>> lists;
  std::unordered_map<std::string, uint32_t> list_ids;  // key: the node pointers' bytes
  std::function<std::string(const Expression&)> printer;
};

Interners& interners() {
  static Interners* in = new Interners();  // leaked on purpose: outlives static destructors
  return *in;
}

}  // namespace

const char* value_kind_name(ValueKind kind) {
  switch (kind) {
    case ValueKind::None: return "none";
    case ValueKind::Class: return "class";
    case ValueKind::I64: return "i64";
    case ValueKind::F64: return "f64";
    case ValueKind::Bool: return "bool";
    case ValueKind::String: return "String";
    case ValueKind::Expr: return "Expr";
    case ValueKind::ExprList: return "ExprList";
  }
  return "?";
}

Value Value::f64(double v) {
  // -0.0 stays distinct from 0.0 (values compare by bits): a Constant -0.0 is a different
  // program from a Constant 0.0 (x + -0.0 is x, x + 0.0 is not when x = -0.0).
  return Value(ValueKind::F64, std::bit_cast<uint64_t>(v));
}
double Value::as_f64() const { return std::bit_cast<double>(bits_); }

Value Value::string(std::string_view s) {
  Interners& in = interners();
  std::lock_guard lock(in.mu);
  auto it = in.string_ids.find(s);
  if (it != in.string_ids.end()) return Value(ValueKind::String, it->second);
  uint32_t id = static_cast<uint32_t>(in.strings.size());
  in.strings.emplace_back(s);
  in.string_ids.emplace(in.strings.back(), id);
  return Value(ValueKind::String, id);
}

const std::string& Value::as_string() const {
  Interners& in = interners();
  std::lock_guard lock(in.mu);
  return in.strings[bits_];
}

Value Value::expr(const Expression& e) {
  Interners& in = interners();
  std::lock_guard lock(in.mu);
  auto [it, inserted] = in.expr_ids.emplace(e.node(), static_cast<uint32_t>(in.exprs.size()));
  if (inserted) in.exprs.push_back(e);
  return Value(ValueKind::Expr, it->second);
}

const Expression& Value::as_expr() const {
  Interners& in = interners();
  std::lock_guard lock(in.mu);
  return in.exprs[bits_];
}

Value Value::expr_list(std::span<const Expression> xs) {
  std::string key(xs.size() * sizeof(const ExprNode*), '\0');
  for (size_t i = 0; i < xs.size(); ++i) {
    const ExprNode* p = xs[i].node();
    std::memcpy(key.data() + i * sizeof(p), &p, sizeof(p));
  }
  Interners& in = interners();
  std::lock_guard lock(in.mu);
  auto [it, inserted] = in.list_ids.emplace(std::move(key), static_cast<uint32_t>(in.lists.size()));
  if (inserted) in.lists.emplace_back(xs.begin(), xs.end());
  return Value(ValueKind::ExprList, it->second);
}

std::span<const Expression> Value::as_expr_list() const {
  Interners& in = interners();
  std::lock_guard lock(in.mu);
  return in.lists[bits_];
}

void set_expression_printer(std::function<std::string(const Expression&)> printer) {
  Interners& in = interners();
  std::lock_guard lock(in.mu);
  in.printer = std::move(printer);
}

static std::string print_expr(const Expression& e) {
  std::function<std::string(const Expression&)> printer;
  {
    Interners& in = interners();
    std::lock_guard lock(in.mu);
    printer = in.printer;
  }
  return printer ? printer(e) : e.to_string();
}

std::string Value::to_string() const {
  std::string s;
  switch (kind_) {
    case ValueKind::None: return "<none>";
    case ValueKind::Class: s = "e"; s += std::to_string(bits_); return s;
    case ValueKind::I64: return std::to_string(as_i64());
    case ValueKind::F64: {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.17g", as_f64());
      s = buf;
      if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
      return s;
    }
    case ValueKind::Bool: return as_bool() ? "true" : "false";
    case ValueKind::String: s = "\""; s += as_string(); s += '"'; return s;
    case ValueKind::Expr: s = "(expr "; s += print_expr(as_expr()); s += ')'; return s;
    case ValueKind::ExprList: {
      s = "[";
      auto xs = as_expr_list();
      for (size_t i = 0; i < xs.size(); ++i) {
        if (i) s += ", ";
        s += print_expr(xs[i]);
      }
      s += ']';
      return s;
    }
  }
  return "?";
}

bool value_less(const Value& a, const Value& b) {
  if (a.kind() != b.kind()) return a.kind() < b.kind();
  switch (a.kind()) {
    case ValueKind::I64: return a.as_i64() < b.as_i64();
    case ValueKind::F64: return a.as_f64() < b.as_f64();
    case ValueKind::String: return a.as_string() < b.as_string();
    default: return a.bits() < b.bits();
  }
}

}  // namespace luminal::egraph
