// Indexing and sorting: gather, scatter, index_select, embedding, one_hot, argsort,
// sort and topk. Flat indices are built from Iota (symbolic in the element index z)
// plus integer arithmetic on the user's index tensor, then fed to Gather/Scatter.
//
// Index bounds: the Gather/Scatter node carries the user's axis (Node::axis), and the
// runtime checks every index against that axis: an index outside [0, size) is an error
// naming the op, the axis, the index and its position (negative indices included, as
// PyTorch raises for them too).
//
// Limitations (documented on purpose):
//   * scatter with duplicate indices: any one of the writes may win;
//   * sorting is rank based (O(n^2) comparisons per sorted row). NaN sorts as the
//     largest value (after +inf), as in PyTorch.

#include "tensor_internal.hpp"

namespace luminal {
namespace detail {

std::vector<Expression> row_major_strides(const Shape& shape) {
  std::vector<Expression> strides(shape.size());
  Expression s = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = s;
    s = s * shape[d];
  }
  return strides;
}

std::vector<Expression> index_coords(const Shape& shape) {
  auto strides = row_major_strides(shape);
  Expression z = Expression::index();
  std::vector<Expression> coords(shape.size());
  for (size_t d = 0; d < shape.size(); ++d)
    coords[d] = d == 0 ? z / strides[d] : (z / strides[d]) % shape[d];
  return coords;
}

DType index_dtype(const Expression& n) {
  auto c = n.as_constant();
  return c && *c < (int64_t{1} << 30) ? DType::I32 : DType::I64;
}

GraphTensor int_scalar(Graph& g, const Expression& value, DType dtype) {
  if (auto c = value.as_constant()) return g.constant(static_cast<double>(*c), dtype);
  return expr_scalar(g, value, dtype);
}

GraphTensor gather_flat(const GraphTensor& data, const GraphTensor& flat_index, int axis) {
  LUMINAL_CHECK(!is_float(flat_index.dtype()), UserOpScope::name_or("gather"), ": indices must be integers, got ",
                dtype_name(flat_index.dtype()));
  Node n;
  n.op = OpKind::Gather;
  n.dtype = data.dtype();
  n.shape = flat_index.shape();
  n.axis = axis;
  n.inputs = {{flat_index.id(), flat_index.view()}, {data.id(), data.view()}};
  return make_node(data.graph(), std::move(n));
}

GraphTensor gather_expr(const GraphTensor& data, const Shape& out_shape, const Expression& flat,
                        const Expression& valid, double fill) {
  Graph& g = data.graph();
  Expression n = data.numel();
  GraphTensor src = data.reshape({n});
  if (!(valid == Expression(1))) {
    // Invalid positions read one extra trailing element holding `fill`.
    src = fill == 0 ? src.pad(0, 0, 1)
                    : GraphTensor::concat({src, g.constant(fill, data.dtype()).expand({1})}, 0);
  }
  Expression index = valid == Expression(1) ? flat : valid * flat + (1 - valid) * n;
  return gather_flat(src, g.iota(index, out_shape, index_dtype(n + 1)));
}

}  // namespace detail

using namespace detail;

namespace {
// torch's rule: index.size(d) <= self.size(d). Only checked when both sizes are
// static; symbolic sizes are trusted (they are only known at execute time).
bool fits(const Expression& inner, const Expression& outer) {
  auto a = inner.as_constant(), b = outer.as_constant();
  return inner == outer || !a || !b || *a <= *b;
}

// Flat index into a row-major tensor of `shape` for each element of `index`, which
// replaces the coordinate along `axis`.
GraphTensor flat_along_axis(const Shape& shape, int axis, const GraphTensor& index) {
  auto strides = row_major_strides(shape);
  auto coords = index_coords(index.shape());
  Expression base = 0;
  for (size_t d = 0; d < shape.size(); ++d)
    if (static_cast<int>(d) != axis) base = base + coords[d] * strides[d];
  Graph& g = index.graph();
  DType dt = index_dtype(product(shape));
  return g.iota(base, index.shape(), dt) + index.cast(dt) * int_scalar(g, strides[axis], dt);
}

// Coordinate along `axis` of every element of `shape`, as an I64 tensor.
GraphTensor axis_iota(Graph& g, const Shape& shape, int axis) {
  return g.iota(index_coords(shape)[axis], shape, DType::I64);
}

void check_index(const GraphTensor& self, const GraphTensor& index, const char* op) {
  LUMINAL_CHECK(!is_float(index.dtype()), UserOpScope::name_or(op), ": index must be an integer tensor, got ", dtype_name(index.dtype()));
  LUMINAL_CHECK(index.rank() == self.rank(), UserOpScope::name_or(op), ": index ", to_string(index.shape()), " and self ",
                to_string(self.shape()), " must have the same rank");
}
}  // namespace

GraphTensor GraphTensor::gather(int axis, const GraphTensor& index) const {
  UserOpScope user_op("gather");
  axis = normalize_axis(axis, rank(), "gather");
  check_index(*this, index, "gather");
  for (int d = 0; d < static_cast<int>(rank()); ++d)
    LUMINAL_CHECK(d == axis || fits(index.dim(d), dim(d)), "gather: index ", to_string(index.shape()),
                  " is larger than self ", to_string(shape()), " in dimension ", d);
  return gather_flat(*this, flat_along_axis(shape(), axis, index), axis);
}

GraphTensor GraphTensor::scatter(int axis, const GraphTensor& index, const GraphTensor& src_in) const {
  UserOpScope user_op("scatter");
  axis = normalize_axis(axis, rank(), "scatter");
  check_index(*this, index, "scatter");
  LUMINAL_CHECK(src_in.rank() == rank(), "scatter: src ", to_string(src_in.shape()), " and self ",
                to_string(shape()), " must have the same rank");
  GraphTensor src = src_in.cast(dtype_);
  for (int d = 0; d < static_cast<int>(rank()); ++d) {
    LUMINAL_CHECK(d == axis || fits(index.dim(d), dim(d)), "scatter: index ", to_string(index.shape()),
                  " is larger than self ", to_string(shape()), " in dimension ", d);
    LUMINAL_CHECK(fits(index.dim(d), src.dim(d)), "scatter: index ", to_string(index.shape()),
                  " is larger than src ", to_string(src_in.shape()), " in dimension ", d);
    if (!(index.dim(d) == src.dim(d))) src = src.slice(d, 0, index.dim(d));  // torch uses src's leading part
  }
  GraphTensor flat = flat_along_axis(shape(), axis, index);
  Node n;
  n.op = OpKind::Scatter;
  n.dtype = dtype_;
  n.shape = shape();
  n.axis = axis;  // the runtime checks each index against this axis (reference_runtime.cpp)
  n.inputs = {{id_, view_}, {flat.id(), flat.view()}, {src.id(), src.view()}};
  return make_node(*graph_, std::move(n));
}

GraphTensor GraphTensor::index_select(int axis, const GraphTensor& index) const {
  UserOpScope user_op("index_select");
  axis = normalize_axis(axis, rank(), "index_select");
  LUMINAL_CHECK(index.rank() == 1, "index_select: index must be 1-D, got ", to_string(index.shape()));
  Shape out = shape();
  out[axis] = index.dim(0);
  GraphTensor idx = index;
  for (int d = 0; d < axis; ++d) idx = idx.unsqueeze(0);
  while (idx.rank() < rank()) idx = idx.unsqueeze(-1);
  return gather(axis, idx.expand(out));
}

GraphTensor GraphTensor::embedding(const GraphTensor& ids) const {
  UserOpScope user_op("embedding");
  LUMINAL_CHECK(rank() == 2, "embedding: table must be (vocab, dim), got ", to_string(shape()));
  LUMINAL_CHECK(!is_float(ids.dtype()), "embedding: ids must be integers, got ", dtype_name(ids.dtype()));
  Shape out = ids.shape();
  out.push_back(dim(1));
  return index_select(0, ids.reshape({ids.numel()})).reshape(out);
}

GraphTensor GraphTensor::one_hot(int64_t num_classes) const {
  UserOpScope user_op("one_hot");
  LUMINAL_CHECK(!is_float(dtype_), "one_hot: needs an integer tensor, got ", dtype_name(dtype_));
  LUMINAL_CHECK(num_classes > 0, "one_hot: num_classes must be positive, got ", num_classes);
  return unsqueeze(-1).eq(graph_->arange(num_classes, DType::I64)).cast(DType::I64);
}

// ---- sorting ----
namespace {
// Position of each element along `axis` after a stable sort (I64, same shape as x).
// Element i goes after element j when x_j orders before x_i, or they are equal and
// j < i. Compared over a (.., i, j, ..) broadcast, then counted.
GraphTensor sort_positions(const GraphTensor& x, int axis, bool descending) {
  Shape full = x.shape();
  full.insert(full.begin() + axis + 1, x.dim(axis));
  GraphTensor xi = x.unsqueeze(axis + 1).expand(full);
  GraphTensor xj = x.unsqueeze(axis).expand(full);
  auto c = index_coords(full);
  GraphTensor j_first = x.graph().iota(lt(c[axis + 1], c[axis]), full, DType::Bool);
  auto ahead = [&](const GraphTensor& a, const GraphTensor& b) { return descending ? b.lt(a) : a.lt(b); };
  if (!is_float(x.dtype())) {
    return ahead(xj, xi).logical_or(xj.eq(xi).logical_and(j_first)).sum({axis + 1});
  }
  // NaN sorts after every number (before, when descending): compare (is_nan, value) pairs
  // with NaNs replaced by 0.
  auto nan = [](const GraphTensor& t) { return t.ne(t); };
  auto clean = [&](const GraphTensor& t) { return GraphTensor::where(nan(t), scalar_like(t, 0), t); };
  GraphTensor ni = nan(xi).cast(DType::I32), nj = nan(xj).cast(DType::I32);
  GraphTensor vi = clean(xi), vj = clean(xj);
  GraphTensor nan_ahead = descending ? ni.lt(nj) : nj.lt(ni);
  GraphTensor value_ahead = ahead(vj, vi).logical_or(vj.eq(vi).logical_and(j_first));
  return nan_ahead.logical_or(nj.eq(ni).logical_and(value_ahead)).sum({axis + 1});
}
}  // namespace

GraphTensor GraphTensor::argsort(int axis, bool descending) const {
  UserOpScope user_op("argsort");
  axis = normalize_axis(axis, rank(), "argsort");
  GraphTensor pos = sort_positions(*this, axis, descending);
  // result[.., pos_i, ..] = i
  GraphTensor zeros = graph_->constant(0, DType::I64).expand(shape());
  return zeros.scatter(axis, pos, axis_iota(*graph_, shape(), axis));
}

std::pair<GraphTensor, GraphTensor> GraphTensor::sort(int axis, bool descending) const {
  UserOpScope user_op("sort");
  GraphTensor idx = argsort(axis, descending);
  return {gather(axis, idx), idx};
}

std::pair<GraphTensor, GraphTensor> GraphTensor::topk(int64_t k, int axis, bool largest) const {
  UserOpScope user_op("topk");
  axis = normalize_axis(axis, rank(), "topk");
  LUMINAL_CHECK(k >= 0 && fits(k, dim(axis)), "topk: k = ", k, " is out of range for dimension ", axis,
                " of size ", dim(axis));
  GraphTensor idx = argsort(axis, largest).slice(axis, Expression(0), Expression(k));
  return {gather(axis, idx), idx};
}

GraphTensor GraphTensor::scatter_add(int axis, const GraphTensor& index, const GraphTensor& src_in) const {
  UserOpScope user_op("scatter_add");
  axis = normalize_axis(axis, rank(), "scatter_add");
  check_index(*this, index, "scatter_add");
  LUMINAL_CHECK(src_in.rank() == rank(), "scatter_add: src ", to_string(src_in.shape()), " and self ",
                to_string(shape()), " must have the same rank");
  GraphTensor src = src_in.cast(dtype_);
  for (int d = 0; d < static_cast<int>(rank()); ++d) {
    LUMINAL_CHECK(d == axis || fits(index.dim(d), dim(d)), "scatter_add: index ", to_string(index.shape()),
                  " is larger than self ", to_string(shape()), " in dimension ", d);
    LUMINAL_CHECK(fits(index.dim(d), src.dim(d)), "scatter_add: index ", to_string(index.shape()),
                  " is larger than src ", to_string(src_in.shape()), " in dimension ", d);
    if (!(index.dim(d) == src.dim(d))) src = src.slice(d, 0, index.dim(d));
  }
  // (.., i, k, ..): does index position k (along axis) land on row i? Summed over k.
  // Duplicates therefore accumulate. Selecting with where (not multiplying by the mask)
  // keeps inf/NaN of non-matching positions out.
  Shape full = index.shape();
  full.insert(full.begin() + axis, dim(axis));
  GraphTensor rows = graph_->iota(index_coords(full)[axis], full, DType::I64);
  GraphTensor hit = index.cast(DType::I64).unsqueeze(axis).expand(full).eq(rows);
  // Reading self at every index makes the runtime check each index against the axis (an
  // out-of-range index is an error, as in PyTorch); the always-true test keeps it alive.
  GraphTensor probe = gather(axis, index);
  GraphTensor checked = probe.eq(probe).logical_or(probe.ne(probe));
  hit = hit.logical_and(checked.unsqueeze(axis));
  GraphTensor zero = scalar_like(src, 0);
  GraphTensor add = where(hit, src.unsqueeze(axis).expand(full), zero).sum({axis + 1}).cast(dtype_);
  GraphTensor touched = hit.any({axis + 1});
  // Index dims smaller than self's: nothing lands beyond them.
  for (int d = 0; d < static_cast<int>(rank()); ++d) {
    if (d == axis || index.dim(d) == dim(d)) continue;
    add = add.pad(d, 0, dim(d) - index.dim(d));
    touched = touched.pad(d, 0, dim(d) - index.dim(d));
  }
  // Untouched elements stay bit-identical (-0.0 + 0.0 would be +0.0).
  return where(touched, *this + add, *this);
}

GraphTensor GraphTensor::index_add(int axis, const GraphTensor& index, const GraphTensor& source, double alpha) const {
  UserOpScope user_op("index_add");
  axis = normalize_axis(axis, rank(), "index_add");
  LUMINAL_CHECK(index.rank() == 1, "index_add: index must be 1-D, got ", to_string(index.shape()));
  LUMINAL_CHECK(source.rank() == rank() && source.dim(axis) == index.dim(0), "index_add: source ",
                to_string(source.shape()), " must match self ", to_string(shape()), " with ", index.dim(0),
                " entries along dimension ", axis);
  for (int d = 0; d < static_cast<int>(rank()); ++d)
    LUMINAL_CHECK(d == axis || source.dim(d) == dim(d), "index_add: source ", to_string(source.shape()),
                  " and self ", to_string(shape()), " differ in dimension ", d);
  GraphTensor idx = index;
  for (int d = 0; d < axis; ++d) idx = idx.unsqueeze(0);
  while (idx.rank() < rank()) idx = idx.unsqueeze(-1);
  GraphTensor src = source.cast(dtype_);
  if (alpha != 1) src = (src * alpha).cast(dtype_);
  return scatter_add(axis, idx.expand(source.shape()), src);
}

GraphTensor GraphTensor::index_put(const std::vector<GraphTensor>& indices, const GraphTensor& values,
                                   bool accumulate) const {
  UserOpScope user_op("index_put");
  LUMINAL_CHECK(!indices.empty() && indices.size() <= rank(), "index_put: ", indices.size(),
                " index tensors for a tensor of rank ", rank());
  Shape b = indices[0].shape();
  for (const auto& ix : indices) {
    LUMINAL_CHECK(!is_float(ix.dtype()) && ix.dtype() != DType::Bool, "index_put: indices must be integer tensors "
                  "(Bool masks are not supported), got ", dtype_name(ix.dtype()));
    b = broadcast_shapes(b, ix.shape());
  }
  size_t k = indices.size();
  // Flat position over the leading k dims (negative indices count from the end).
  Expression lead = 1;
  for (size_t d = 0; d < k; ++d) lead = lead * dim(static_cast<int>(d));
  GraphTensor flat = graph_->constant(0, DType::I64).expand(b);
  for (size_t d = 0; d < k; ++d) {
    GraphTensor n = int_scalar(*graph_, dim(static_cast<int>(d)), DType::I64);
    GraphTensor ix = indices[d].cast(DType::I64).expand(b);
    ix = where(ix.lt(0.0), ix + n, ix);
    flat = flat * n + ix;
  }
  Shape full_shape = shape();
  Shape rest(full_shape.begin() + static_cast<long>(k), full_shape.end());
  Shape target = b;
  target.insert(target.end(), rest.begin(), rest.end());
  Expression m = product(b);
  Shape rows = {m};
  rows.insert(rows.end(), rest.begin(), rest.end());
  Shape self_rows = {lead};
  self_rows.insert(self_rows.end(), rest.begin(), rest.end());
  GraphTensor vals = values.cast(dtype_).expand(target).reshape(rows);
  GraphTensor idx = flat.reshape({m});
  for (size_t d = 0; d < rest.size(); ++d) idx = idx.unsqueeze(-1);
  idx = idx.expand(rows);
  GraphTensor base = reshape(self_rows);
  GraphTensor r = accumulate ? base.scatter_add(0, idx, vals) : base.scatter(0, idx, vals);
  return r.reshape(shape());
}

}  // namespace luminal
