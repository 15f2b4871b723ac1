#include "luminal/shape.hpp"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "luminal/error.hpp"

namespace luminal {
namespace {

const Expression kZ = Expression::index();

// f(z) with z replaced by `arg`.
Expression at(const Expression& f, const Expression& arg) { return f.substitute(Expression::kIndexName, arg); }

int check_axis(int axis, size_t rank, const char* op) {
  int r = static_cast<int>(rank);
  if (axis < 0) axis += r;
  LUMINAL_CHECK(axis >= 0 && axis < r, op, ": axis ", axis, " out of range for rank ", rank);
  return axis;
}

bool is_one(const Expression& e) { return e.as_constant() == std::optional<int64_t>(1); }

// Collapse dims [first, last] into one dimension: element z of the merged dim is
// element (z / inner_k) % size_k of each original dim k.
ViewDim merge_range(const std::vector<ViewDim>& dims, size_t first, size_t last) {
  Expression size = 1, offset = 0, valid = 1, inner = 1;
  for (size_t k = last + 1; k-- > first;) {
    Expression idx = k == first ? Expression(kZ / inner) : (kZ / inner) % dims[k].size;
    offset = offset + at(dims[k].offset, idx);
    valid = logical_and(valid, at(dims[k].valid, idx));
    inner = inner * dims[k].size;
  }
  size = inner;
  return {size, offset, valid};
}

// Value of an expression with every variable set to a fixed guess; only used to
// decide which side of a reshape to grow next, never for correctness.
int64_t magnitude_guess(const Expression& e) {
  DimMap guess;
  for (const auto& v : e.variables()) guess[v] = 7;
  auto value = e.try_eval(guess);
  return value ? *value : 0;
}

}  // namespace

std::string to_string(const Shape& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i].to_string();
  os << "]";
  return os.str();
}

ShapeTracker ShapeTracker::contiguous(const Shape& shape) {
  std::vector<ViewDim> dims(shape.size());
  Expression stride = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    dims[d] = {shape[d], kZ * stride, 1};
    stride = stride * shape[d];
  }
  return ShapeTracker(std::move(dims));
}

Shape ShapeTracker::shape() const {
  Shape s;
  s.reserve(dims_.size());
  for (const auto& d : dims_) s.push_back(d.size);
  return s;
}

Expression ShapeTracker::n_elements() const {
  Expression n = 1;
  for (const auto& d : dims_) n = n * d.size;
  return n;
}

bool ShapeTracker::is_contiguous() const {
  if (!(base_offset_ == Expression(0)) || !(base_valid_ == Expression(1))) return false;
  return dims_ == contiguous(shape()).dims_;
}

bool ShapeTracker::has_padding() const {
  if (!(base_valid_ == Expression(1))) return true;
  return std::any_of(dims_.begin(), dims_.end(), [](const ViewDim& d) { return !(d.valid == Expression(1)); });
}

ShapeTracker ShapeTracker::permute(std::span<const int> axes) const {
  LUMINAL_CHECK(axes.size() == rank(), "permute: got ", axes.size(), " axes for a tensor of rank ", rank());
  std::vector<bool> seen(rank(), false);
  std::vector<ViewDim> out;
  for (int a : axes) {
    int axis = check_axis(a, rank(), "permute");
    LUMINAL_CHECK(!seen[axis], "permute: axis ", a, " appears twice; axes must be a permutation");
    seen[axis] = true;
    out.push_back(dims_[axis]);
  }
  return ShapeTracker(std::move(out), base_offset_, base_valid_);
}

ShapeTracker ShapeTracker::insert_broadcast(int axis, const Expression& size) const {
  int r = static_cast<int>(rank());
  if (axis < 0) axis += r + 1;
  LUMINAL_CHECK(axis >= 0 && axis <= r, "broadcast: axis ", axis, " out of range for rank ", rank());
  auto dims = dims_;
  dims.insert(dims.begin() + axis, ViewDim{size, 0, 1});
  return ShapeTracker(std::move(dims), base_offset_, base_valid_);
}

ShapeTracker ShapeTracker::expand_dim(int axis, const Expression& size) const {
  axis = check_axis(axis, rank(), "expand");
  LUMINAL_CHECK(is_one(dims_[axis].size), "expand: dimension ", axis, " has size ", dims_[axis].size,
                "; only size-1 dimensions can be expanded");
  auto dims = dims_;
  dims[axis] = {size, at(dims_[axis].offset, 0), at(dims_[axis].valid, 0)};
  return ShapeTracker(std::move(dims), base_offset_, base_valid_);
}

ShapeTracker ShapeTracker::remove_dim(int axis) const {
  axis = check_axis(axis, rank(), "squeeze");
  LUMINAL_CHECK(is_one(dims_[axis].size), "squeeze: dimension ", axis, " has size ", dims_[axis].size,
                ", not 1");
  auto dims = dims_;
  Expression base = base_offset_ + at(dims_[axis].offset, 0);
  Expression valid = logical_and(base_valid_, at(dims_[axis].valid, 0));
  dims.erase(dims.begin() + axis);
  return ShapeTracker(std::move(dims), base, valid);
}

ShapeTracker ShapeTracker::slice(int axis, const Expression& start, const Expression& end, int64_t step) const {
  axis = check_axis(axis, rank(), "slice");
  LUMINAL_CHECK(step > 0, "slice: step must be positive, got ", step, " (use flip for reversal)");
  auto dims = dims_;
  Expression source = kZ * step + start;
  dims[axis] = {ceil_div(max(end - start, 0), step), at(dims_[axis].offset, source), at(dims_[axis].valid, source)};
  return ShapeTracker(std::move(dims), base_offset_, base_valid_);
}

ShapeTracker ShapeTracker::flip(int axis) const {
  axis = check_axis(axis, rank(), "flip");
  auto dims = dims_;
  Expression source = dims_[axis].size - 1 - kZ;
  dims[axis] = {dims_[axis].size, at(dims_[axis].offset, source), at(dims_[axis].valid, source)};
  return ShapeTracker(std::move(dims), base_offset_, base_valid_);
}

ShapeTracker ShapeTracker::pad(int axis, const Expression& before, const Expression& after) const {
  axis = check_axis(axis, rank(), "pad");
  auto dims = dims_;
  const ViewDim& d = dims_[axis];
  Expression source = kZ - before;
  Expression inside = logical_and(ge(kZ, before), lt(kZ, before + d.size));
  dims[axis] = {d.size + before + after, at(d.offset, source), logical_and(inside, at(d.valid, source))};
  return ShapeTracker(std::move(dims), base_offset_, base_valid_);
}

ShapeTracker ShapeTracker::merge_dims(int first, int last) const {
  first = check_axis(first, rank(), "merge_dims");
  last = check_axis(last, rank(), "merge_dims");
  LUMINAL_CHECK(first <= last, "merge_dims: first axis ", first, " after last axis ", last);
  std::vector<ViewDim> dims(dims_.begin(), dims_.begin() + first);
  dims.push_back(merge_range(dims_, first, last));
  dims.insert(dims.end(), dims_.begin() + last + 1, dims_.end());
  return ShapeTracker(std::move(dims), base_offset_, base_valid_);
}

std::optional<ShapeTracker> ShapeTracker::reshape(const Shape& new_shape) const {
  LUMINAL_CHECK(product(new_shape) == n_elements(), "reshape: cannot view ", to_string(shape()), " (",
                n_elements(), " elements) as ", to_string(new_shape), " (", product(new_shape), " elements)");
  // Size-1 dims carry no index: fold old ones into the base, re-insert new ones at the end.
  ShapeTracker source = *this;
  for (size_t d = source.rank(); d-- > 0;)
    if (is_one(source.dims_[d].size)) source = source.remove_dim(static_cast<int>(d));
  std::vector<size_t> kept;  // positions in new_shape that are not size 1
  for (size_t j = 0; j < new_shape.size(); ++j)
    if (!is_one(new_shape[j])) kept.push_back(j);

  std::vector<ViewDim> out_dims;
  const auto& old = source.dims_;
  size_t i = 0, k = 0;
  while (i < old.size() || k < kept.size()) {
    if (i == old.size() || k == kept.size()) return std::nullopt;
    size_t i_end = i, k_end = k;
    Expression old_size = old[i].size, new_size = new_shape[kept[k]];
    while (!(old_size == new_size)) {
      bool grow_old = magnitude_guess(old_size) < magnitude_guess(new_size);
      if (grow_old && i_end + 1 < old.size()) old_size = old_size * old[++i_end].size;
      else if (k_end + 1 < kept.size()) new_size = new_size * new_shape[kept[++k_end]];
      else if (i_end + 1 < old.size()) old_size = old_size * old[++i_end].size;
      else return std::nullopt;
    }
    ViewDim merged = merge_range(old, i, i_end);
    if (k == k_end) {
      out_dims.push_back(merged);
    } else {
      // Splitting needs an affine, unpadded dimension: offset(z) = a*z + b.
      if (!(merged.valid == Expression(1))) return std::nullopt;
      Expression b = at(merged.offset, 0);
      Expression a = at(merged.offset, 1) - b;
      if (!(a * kZ + b == merged.offset)) return std::nullopt;
      Expression inner = 1;
      std::vector<ViewDim> group(k_end - k + 1);
      for (size_t j = k_end + 1; j-- > k;) {
        group[j - k] = {new_shape[kept[j]], kZ * a * inner + (j == k ? b : Expression(0)), 1};
        inner = inner * new_shape[kept[j]];
      }
      out_dims.insert(out_dims.end(), group.begin(), group.end());
    }
    i = i_end + 1;
    k = k_end + 1;
  }
  std::vector<ViewDim> dims;
  for (size_t j = 0, next = 0; j < new_shape.size(); ++j) {
    if (is_one(new_shape[j])) dims.push_back({1, 0, 1});
    else dims.push_back(out_dims[next++]);
  }
  return ShapeTracker(std::move(dims), source.base_offset_, source.base_valid_);
}

Expression ShapeTracker::index_expression() const {
  if (dims_.empty()) return base_offset_;
  return merge_range(dims_, 0, dims_.size() - 1).offset + base_offset_;
}

Expression ShapeTracker::valid_expression() const {
  if (dims_.empty()) return base_valid_;
  return logical_and(merge_range(dims_, 0, dims_.size() - 1).valid, base_valid_);
}

}  // namespace luminal
