// Matrix products: a broadcast Mul in [..., m, n, k] space followed by a SumReduce
// over k. Backends recognise the pair by its strides (a's n-stride and b's m-stride
// are 0) and substitute library or generated GEMMs.
#include <algorithm>
#include <map>
#include <string>

#include "tensor_internal.hpp"

namespace luminal {
using namespace detail;

GraphTensor GraphTensor::matmul(const GraphTensor& b_in) const {
  UserOpScope user_op("matmul");
  LUMINAL_CHECK(rank() >= 1 && b_in.rank() >= 1, "matmul: both operands need rank >= 1 (got ", to_string(shape()),
                " and ", to_string(b_in.shape()), ")");
  GraphTensor a = rank() == 1 ? unsqueeze(0) : *this;  // (k) -> (1, k)
  GraphTensor b = b_in.rank() == 1 ? b_in.unsqueeze(1) : b_in;  // (k) -> (k, 1)
  Expression k = a.dim(-1);
  LUMINAL_CHECK(k == b.dim(-2), "matmul: inner dimensions differ: ", to_string(shape()), " @ ",
                to_string(b_in.shape()));
  Expression m = a.dim(-2), n = b.dim(-1);
  // Broadcast the batch dims.
  Shape a_shape = a.shape(), b_shape = b.shape();
  Shape a_batch(a_shape.begin(), a_shape.end() - 2), b_batch(b_shape.begin(), b_shape.end() - 2);
  Shape batch = broadcast_shapes(a_batch, b_batch);
  Shape a_full = batch, b_full = batch;
  a_full.insert(a_full.end(), {m, k});
  b_full.insert(b_full.end(), {k, n});
  a = a.expand(a_full);
  b = b.expand(b_full);
  int r = static_cast<int>(batch.size());
  GraphTensor a3 = a.expand_dim(r + 1, n);             // [..., m, n, k]
  GraphTensor b3 = b.transpose(-2, -1).expand_dim(r, m);  // [..., m, n, k]
  GraphTensor prod = a3 * b3;
  GraphTensor out = reduce(OpKind::SumReduce, prod, -1);
  if (rank() == 1) out = out.squeeze(-2);
  if (b_in.rank() == 1) out = out.squeeze(-1);
  return out;
}

GraphTensor GraphTensor::linear(const GraphTensor& weight, const std::optional<GraphTensor>& bias) const {
  UserOpScope user_op("linear");
  LUMINAL_CHECK(weight.rank() == 2, "linear: weight must be (out, in), got ", to_string(weight.shape()));
  LUMINAL_CHECK(dim(-1) == weight.dim(1), "linear: input features ", dim(-1), " do not match weight ",
                to_string(weight.shape()));
  GraphTensor y = matmul(weight.t());
  if (bias) y = y + *bias;
  return y;
}

GraphTensor GraphTensor::outer(const GraphTensor& b) const {
  UserOpScope user_op("outer");
  LUMINAL_CHECK(rank() == 1 && b.rank() == 1, "outer: needs two 1-D tensors, got ", to_string(shape()), " and ",
                to_string(b.shape()));
  return unsqueeze(1) * b.unsqueeze(0);
}

GraphTensor GraphTensor::diagonal(int64_t offset, int axis1, int axis2) const {
  UserOpScope user_op("diagonal");
  axis1 = normalize_axis(axis1, rank(), "diagonal");
  axis2 = normalize_axis(axis2, rank(), "diagonal");
  LUMINAL_CHECK(axis1 != axis2, "diagonal: axis1 and axis2 must differ (both ", axis1, ")");
  Expression n1 = dim(axis1), n2 = dim(axis2);
  Expression len = luminal::max(offset >= 0 ? luminal::min(n1, n2 - offset) : luminal::min(n1 + offset, n2), 0);
  Shape out;
  std::vector<int> kept;
  for (int d = 0; d < static_cast<int>(rank()); ++d)
    if (d != axis1 && d != axis2) {
      out.push_back(dim(d));
      kept.push_back(d);
    }
  out.push_back(len);
  auto c = index_coords(out);
  auto strides = row_major_strides(shape());
  Expression flat = 0;
  for (size_t k = 0; k < kept.size(); ++k) flat = flat + c[k] * strides[kept[k]];
  Expression i = c.back();
  flat = flat + (i + std::max<int64_t>(-offset, 0)) * strides[axis1] + (i + std::max<int64_t>(offset, 0)) * strides[axis2];
  return gather_expr(*this, out, flat, 1);
}

GraphTensor GraphTensor::diag(int64_t offset) const {
  UserOpScope user_op("diag");
  LUMINAL_CHECK(rank() == 1 || rank() == 2, "diag: needs a 1-D or 2-D tensor, got ", to_string(shape()));
  if (rank() == 2) return diagonal(offset, 0, 1);
  // (n) -> (n + |offset|)^2 with x on that diagonal and 0 elsewhere.
  Expression n = dim(0) + (offset < 0 ? -offset : offset);
  Shape out = {n, n};
  auto c = index_coords(out);
  Expression src = offset >= 0 ? c[0] : c[1];
  return gather_expr(*this, out, src, luminal::eq(c[1] - c[0], offset), 0);
}

GraphTensor GraphTensor::trace() const {
  UserOpScope user_op("trace");
  LUMINAL_CHECK(rank() == 2, "trace: needs a 2-D tensor, got ", to_string(shape()));
  return diagonal(0, 0, 1).sum({0});
}

namespace {
bool is_label(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'); }
}  // namespace

GraphTensor GraphTensor::einsum(const std::string& equation_in, const std::vector<GraphTensor>& operands) {
  UserOpScope user_op("einsum");
  std::string eq;
  for (char ch : equation_in)
    if (ch != ' ') eq += ch;
  LUMINAL_CHECK(!operands.empty(), "einsum: no operands");
  size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  LUMINAL_CHECK(terms.size() == operands.size(), "einsum: '", equation_in, "' has ", terms.size(), " operands, got ",
                operands.size(), " tensors");
  // Ellipsis dims become internal labels '0'..'9', aligned from the right across operands.
  size_t ellipsis_dims = 0;
  std::vector<std::string> labels(terms.size());
  for (size_t t = 0; t < terms.size(); ++t) {
    size_t dots = terms[t].find("...");
    size_t named = terms[t].size() - (dots == std::string::npos ? 0 : 3);
    LUMINAL_CHECK(dots != std::string::npos ? operands[t].rank() >= named : operands[t].rank() == named, "einsum: term '",
                  terms[t], "' does not match operand ", t, " of shape ", to_string(operands[t].shape()));
    if (dots != std::string::npos) ellipsis_dims = std::max(ellipsis_dims, operands[t].rank() - named);
  }
  LUMINAL_CHECK(ellipsis_dims <= 10, "einsum: too many dims under '...'");
  auto expand_ellipsis = [&](const std::string& term, size_t n) {
    size_t dots = term.find("...");
    if (dots == std::string::npos) return term;
    std::string e;
    for (size_t k = ellipsis_dims - n; k < ellipsis_dims; ++k) e += static_cast<char>('0' + k);
    return term.substr(0, dots) + e + term.substr(dots + 3);
  };
  for (size_t t = 0; t < terms.size(); ++t) {
    size_t dots = terms[t].find("...");
    size_t n = dots == std::string::npos ? 0 : operands[t].rank() - (terms[t].size() - 3);
    labels[t] = expand_ellipsis(terms[t], n);
    for (char ch : labels[t])
      LUMINAL_CHECK(is_label(ch) || (ch >= '0' && ch <= '9'), "einsum: invalid subscript '", ch, "' in '",
                    equation_in, "'");
  }
  // The output: given, or every label used once, in alphabetical order (ellipsis first).
  std::string out;
  std::map<char, int> uses;
  for (const auto& l : labels)
    for (char ch : l) ++uses[ch];
  if (arrow != std::string::npos) {
    std::string rhs = eq.substr(arrow + 2);
    out = expand_ellipsis(rhs, rhs.find("...") == std::string::npos ? 0 : ellipsis_dims);
    for (char ch : out)
      LUMINAL_CHECK(uses.count(ch) && std::count(out.begin(), out.end(), ch) == 1, "einsum: output subscript '", ch,
                    "' is repeated or not in the inputs of '", equation_in, "'");
  } else {
    for (size_t k = 0; k < ellipsis_dims; ++k) out += static_cast<char>('0' + k);
    for (auto& [ch, n] : uses)
      if (n == 1 && is_label(ch)) out += ch;
  }
  // Every label's position: output labels first, then the contracted ones.
  std::string order = out;
  for (auto& [ch, n] : uses)
    if (order.find(ch) == std::string::npos) order += ch;
  GraphTensor product;
  DType dt = operands[0].dtype();
  for (size_t t = 0; t < operands.size(); ++t) {
    GraphTensor x = operands[t];
    dt = promote(dt, x.dtype());
    std::string l = labels[t];
    // A label repeated within one operand takes the diagonal (moved to the last axis).
    for (size_t a = 0; a < l.size(); ++a) {
      size_t b = l.find(l[a], a + 1);
      if (b == std::string::npos) continue;
      char ch = l[a];
      x = x.diagonal(0, static_cast<int>(a), static_cast<int>(b));
      l.erase(b, 1);
      l.erase(a, 1);
      l += ch;
      a = static_cast<size_t>(-1);  // rescan
    }
    // Permute to the global order, then insert size-1 dims for the labels it lacks.
    std::vector<int> perm;
    for (char ch : order)
      if (size_t p = l.find(ch); p != std::string::npos) perm.push_back(static_cast<int>(p));
    x = x.permute(perm);
    for (size_t k = 0; k < order.size(); ++k)
      if (l.find(order[k]) == std::string::npos) x = x.unsqueeze(static_cast<int>(k));
    product = t == 0 ? x : product * x;
  }
  std::vector<int> contracted;
  for (size_t k = out.size(); k < order.size(); ++k) contracted.push_back(static_cast<int>(k));
  GraphTensor r = contracted.empty() ? product : product.sum(contracted);
  return r.cast(dt);
}

}  // namespace luminal
