#include "luminal/backend_op.hpp"

#include <sstream>

#include "luminal/error.hpp"

namespace luminal {
namespace {
template <class T>
const T& attr_as(const BackendOpCall& c, size_t k, const char* kind) {
  LUMINAL_ASSERT(k < c.attrs.size(), "backend op ", c.name, ": attribute ", k, " of ", c.attrs.size());
  const T* v = std::get_if<T>(&c.attrs[k]);
  LUMINAL_ASSERT(v != nullptr, "backend op ", c.name, ": attribute ", k, " is not ", kind);
  return *v;
}
}  // namespace

int64_t BackendOpCall::i64(size_t k) const { return attr_as<int64_t>(*this, k, "an i64"); }
double BackendOpCall::f64(size_t k) const { return attr_as<double>(*this, k, "an f64"); }
const std::string& BackendOpCall::str(size_t k) const { return attr_as<std::string>(*this, k, "a String"); }
DType BackendOpCall::dtype(size_t k) const { return parse_dtype(str(k)); }
const Expression& BackendOpCall::expr(size_t k) const { return attr_as<Expression>(*this, k, "an Expr"); }
const std::vector<Expression>& BackendOpCall::exprs(size_t k) const {
  return attr_as<std::vector<Expression>>(*this, k, "an ExprList");
}

std::string BackendOpCall::to_string() const {
  std::ostringstream os;
  os << name << "(";
  for (size_t k = 0; k < attrs.size(); ++k) {
    if (k) os << ", ";
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::string>) os << '"' << v << '"';
          else if constexpr (std::is_same_v<T, Expression>) os << v.to_string();
          else if constexpr (std::is_same_v<T, std::vector<Expression>>) {
            os << "[";
            for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i].to_string();
            os << "]";
          } else os << v;
        },
        attrs[k]);
  }
  os << ")";
  return os.str();
}

}  // namespace luminal
