// ShapeTracker: a view of a buffer. Views move no data; permute, broadcast, slice,
// flip, pad, merge and (where possible) split only rewrite the tracker.
//
// Each logical dimension d has a size and two functions of the reserved index
// variable z (its index along d):
//   offset_d(z): the physical offset this dimension contributes;
//   valid_d(z):  1 when the element exists, 0 inside padding (reads there give 0).
// The physical index of logical element (z_0, ..., z_{n-1}) is sum_d offset_d(z_d).
// Because every function depends on one dimension's index only, a backend can
// tabulate each dimension separately (the reference interpreter does) or emit
// index_expression() for generated code.
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "luminal/expression.hpp"

namespace luminal {

using Shape = std::vector<Expression>;

struct ViewDim {
  Expression size;
  Expression offset;  // function of z
  Expression valid;   // function of z; the constant 1 when no padding
  friend bool operator==(const ViewDim&, const ViewDim&) = default;
};

class ShapeTracker {
 public:
  ShapeTracker() = default;
  // Row-major contiguous view of `shape`.
  static ShapeTracker contiguous(const Shape& shape);
  // Rebuild a view from its parts (deserialisation, e.g. from an e-graph payload).
  static ShapeTracker from_parts(std::vector<ViewDim> dims, Expression base_offset, Expression base_valid) {
    return ShapeTracker(std::move(dims), base_offset, base_valid);
  }

  size_t rank() const { return dims_.size(); }
  Shape shape() const;
  const std::vector<ViewDim>& dims() const { return dims_; }
  // Offset and validity that belong to no dimension (left by removing size-1 dims).
  const Expression& base_offset() const { return base_offset_; }
  const Expression& base_valid() const { return base_valid_; }
  Expression n_elements() const;
  bool is_contiguous() const;  // reads exactly a row-major buffer of shape()
  bool has_padding() const;

  // Each returns a new view; invalid arguments throw luminal::Error.
  ShapeTracker permute(std::span<const int> axes) const;
  ShapeTracker insert_broadcast(int axis, const Expression& size) const;  // new dim, offset 0
  ShapeTracker expand_dim(int axis, const Expression& size) const;        // size-1 dim -> size
  ShapeTracker remove_dim(int axis) const;                                // size-1 dim
  ShapeTracker slice(int axis, const Expression& start, const Expression& end, int64_t step = 1) const;
  ShapeTracker flip(int axis) const;
  ShapeTracker pad(int axis, const Expression& before, const Expression& after) const;
  ShapeTracker merge_dims(int first, int last) const;  // dims [first, last] become one
  // Split or merge into `shape`; nullopt when the result is not expressible as a view
  // (e.g. splitting a padded or non-linear dimension): the caller then materialises.
  std::optional<ShapeTracker> reshape(const Shape& shape) const;

  // Flat physical index / validity as a function of the flat logical index z.
  Expression index_expression() const;
  Expression valid_expression() const;

  friend bool operator==(const ShapeTracker&, const ShapeTracker&) = default;

 private:
  explicit ShapeTracker(std::vector<ViewDim> dims, Expression base_offset = 0, Expression base_valid = 1)
      : dims_(std::move(dims)), base_offset_(base_offset), base_valid_(base_valid) {}
  std::vector<ViewDim> dims_;
  Expression base_offset_ = 0;
  Expression base_valid_ = 1;
};

std::string to_string(const Shape& shape);

}  // namespace luminal
