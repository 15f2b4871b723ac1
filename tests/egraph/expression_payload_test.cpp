// luminal::Expression payloads (shapes, strides) inside the e-graph.
#include <gtest/gtest.h>

#include "luminal/egraph/egraph.hpp"
#include "luminal/egraph/extract.hpp"
#include "luminal/expression.hpp"

using namespace luminal::egraph;
using luminal::Expression;

namespace {

// The coefficient of `var` in an expression linear in it: e(var=1) - e(var=0).
std::optional<Value> expr_coeff(std::span<const Value> a) {
  if (a.size() != 2 || a[0].kind() != ValueKind::Expr || a[1].kind() != ValueKind::String)
    return std::nullopt;
  const Expression& e = a[0].as_expr();
  Expression c = e.substitute(a[1].as_string(), Expression(1)) - e.substitute(a[1].as_string(), Expression(0));
  if (c.depends_on(a[1].as_string())) return std::nullopt;  // not linear
  return Value::expr(c);
}

// The n-th element of an ExprList.
std::optional<Value> list_nth(std::span<const Value> a) {
  if (a.size() != 2 || a[0].kind() != ValueKind::ExprList || a[1].kind() != ValueKind::I64) return std::nullopt;
  auto xs = a[0].as_expr_list();
  int64_t i = a[1].as_i64();
  if (i < 0 || i >= static_cast<int64_t>(xs.size())) return std::nullopt;
  return Value::expr(xs[i]);
}

}  // namespace

TEST(ExpressionPayload, InternedByCanonicalForm) {
  Expression n = Expression::var("n");
  EXPECT_EQ(Value::expr(n * 4 + 1), Value::expr(1 + 4 * n));
  EXPECT_FALSE(Value::expr(n * 4) == Value::expr(n * 2));
  std::vector<Expression> a = {n, Expression(4)}, b = {Expression::var("n"), Expression(2) * 2};
  EXPECT_EQ(Value::expr_list(a), Value::expr_list(b));
  EXPECT_EQ(Value::expr_list(a).as_expr_list().size(), 2u);
  EXPECT_EQ(Value::expr(Expression(7)).to_string(), "(expr 7)");
  set_expression_printer([](const Expression&) { return std::string("E"); });
  EXPECT_EQ(Value::expr(Expression(7)).to_string(), "(expr E)");
  set_expression_printer({});
  EXPECT_EQ(Value::expr_list(a).to_string(), "[n, 4]");
}

TEST(ExpressionPayload, StrideRecognitionWithHostPrimitives) {
  EGraph g;
  g.register_primitive("expr-coeff", expr_coeff);
  g.register_primitive("list-nth", list_nth);
  g.load_string(R"(
    (datatype IR (Input String) (View ExprList ExprList IR) (Transposed IR))
    ; a 2-D view whose first stride is 1*z and second is n*z is a transpose of a row-major
    ; [n, m] tensor
    (rule ((= ?v (View ?shape ?strides ?x))
           (= ?s0 (list-nth ?strides 0)) (= ?s1 (list-nth ?strides 1))
           (= (expr-coeff ?s0 "z") (list-nth ?shape 1))
           (= (expr-coeff ?s1 "z") 1))
          ((union ?v (Transposed ?x)))
          :name "transpose-view")
  )");
  Expression z = Expression::index(), n = Expression::var("n"), m = Expression::var("m");
  OpId view = *g.find_op("View");
  ClassId x = g.add_term(R"((Input "x"))");
  auto add_view = [&](std::vector<Expression> shape, std::vector<Expression> strides) {
    return g.add(view, std::vector<Value>{Value::expr_list(shape), Value::expr_list(strides), Value::cls(x)});
  };
  ClassId t = add_view({m, n}, {z * n, z});   // stride n on dim 0 (size m), 1 on dim 1 (size n)
  ClassId not_t = add_view({m, n}, {z, z * n});
  EXPECT_EQ(add_view({m, n}, {n * z, z}), t);  // the hashcons sees the same payloads
  RunReport r = g.run(Schedule::run(""));
  EXPECT_EQ(r.rules[0].matches, 1u);
  EXPECT_EQ(g.find(t), g.find(g.add_term(R"((Transposed (Input "x")))")));
  EXPECT_EQ(g.class_nodes(not_t).size(), 1u);
  EXPECT_NE(g.dump().find("(View [m, n]"), std::string::npos);
}
