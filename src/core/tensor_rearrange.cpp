// Rearranging movement ops: roll, movedim, unbind, repeat_interleave, Tensor.unfold,
// pixel_shuffle / pixel_unshuffle. Views where the ShapeTracker can express them; a
// single Gather with a symbolic index otherwise.
#include <algorithm>

#include "tensor_internal.hpp"

namespace luminal {
using namespace detail;

GraphTensor GraphTensor::roll(std::vector<int64_t> shifts, std::vector<int> axes) const {
  UserOpScope user_op("roll");
  if (axes.empty()) {
    LUMINAL_CHECK(shifts.size() == 1, "roll: without axes, give one shift (got ", shifts.size(), ")");
    return reshape({numel()}).roll(shifts, {0}).reshape(shape());
  }
  LUMINAL_CHECK(shifts.size() == axes.size(), "roll: ", shifts.size(), " shifts for ", axes.size(), " axes");
  std::vector<int64_t> shift_of(rank(), 0);
  for (size_t k = 0; k < axes.size(); ++k) shift_of[normalize_axis(axes[k], rank(), "roll")] += shifts[k];
  // out[c] = x[c - shift (mod n)] along each rolled axis.
  Shape out = shape();
  auto c = index_coords(out);
  auto strides = row_major_strides(out);
  Expression flat = 0;
  for (size_t d = 0; d < rank(); ++d) {
    Expression src = shift_of[d] == 0 ? c[d] : (c[d] - shift_of[d]) % out[d];
    flat = flat + src * strides[d];
  }
  return gather_expr(*this, out, flat, 1);
}

GraphTensor GraphTensor::movedim(std::vector<int> source, std::vector<int> destination) const {
  UserOpScope user_op("movedim");
  LUMINAL_CHECK(source.size() == destination.size(), "movedim: ", source.size(), " source dims but ",
                destination.size(), " destinations");
  const int r = static_cast<int>(rank());
  std::vector<int> perm(rank(), -1);
  std::vector<bool> moved(rank(), false);
  for (size_t k = 0; k < source.size(); ++k) {
    int s = normalize_axis(source[k], rank(), "movedim"), d = normalize_axis(destination[k], rank(), "movedim");
    LUMINAL_CHECK(!moved[s] && perm[d] < 0, "movedim: a dim repeats in source or destination");
    perm[d] = s;
    moved[s] = true;
  }
  int next = 0;  // the dims that stay keep their order in the free slots
  for (int d = 0; d < r; ++d) {
    if (perm[d] >= 0) continue;
    while (moved[next]) ++next;
    perm[d] = next++;
  }
  return permute(perm);
}

std::vector<GraphTensor> GraphTensor::unbind(int axis) const {
  UserOpScope user_op("unbind");
  axis = normalize_axis(axis, rank(), "unbind");
  auto n = dim(axis).as_constant();
  LUMINAL_CHECK(n.has_value(), "unbind: dimension ", axis, " must be static, got ", dim(axis));
  std::vector<GraphTensor> out;
  for (int64_t i = 0; i < *n; ++i) out.push_back(slice(axis, Expression(i), Expression(i + 1)).squeeze(axis));
  return out;
}

GraphTensor GraphTensor::repeat_interleave(int64_t repeats, std::optional<int> axis) const {
  UserOpScope user_op("repeat_interleave");
  LUMINAL_CHECK(repeats >= 0, "repeat_interleave: repeats must be non-negative, got ", repeats);
  if (!axis) return reshape({numel()}).repeat_interleave(repeats, 0);
  int a = normalize_axis(*axis, rank(), "repeat_interleave");
  // (.., n, ..) -> (.., n, repeats, ..) broadcast, then the two merged.
  GraphTensor x = expand_dim(a + 1, repeats);
  return GraphTensor(x.graph_, x.id_, x.view_.merge_dims(a, a + 1), x.dtype_);
}

GraphTensor GraphTensor::unfold(int axis, int64_t size, int64_t step) const {
  UserOpScope user_op("unfold");
  axis = normalize_axis(axis, rank(), "unfold");
  LUMINAL_CHECK(size >= 0 && step > 0, "unfold: size must be non-negative and step positive (got size ", size,
                ", step ", step, ")");
  auto n = dim(axis).as_constant();
  LUMINAL_CHECK(!n || size <= *n, "unfold: size ", size, " exceeds dimension ", axis, " of size ", dim(axis));
  Shape out = shape();
  out[axis] = (dim(axis) - size) / step + 1;
  out.push_back(size);
  auto c = index_coords(out);
  auto strides = row_major_strides(shape());
  Expression flat = 0;
  for (size_t d = 0; d < rank(); ++d) {
    Expression src = static_cast<int>(d) == axis ? c[d] * step + c[rank()] : c[d];
    flat = flat + src * strides[d];
  }
  return gather_expr(*this, out, flat, 1);
}

GraphTensor GraphTensor::pixel_shuffle(int upscale) const {
  UserOpScope user_op("pixel_shuffle");
  LUMINAL_CHECK(rank() >= 3 && upscale > 0, "pixel_shuffle: expected (*, C*r*r, H, W) and r > 0, got ",
                to_string(shape()), " and r = ", upscale);
  auto c = dim(-3).as_constant();
  const int64_t r2 = int64_t{upscale} * upscale;
  LUMINAL_CHECK(c && *c % r2 == 0, "pixel_shuffle: channels ", dim(-3), " not divisible by ", r2);
  Shape full_shape = shape();
  Shape lead(full_shape.begin(), full_shape.end() - 3);
  Expression h = dim(-2), w = dim(-1);
  int b = static_cast<int>(lead.size());
  Shape split = lead;
  for (Expression e : {Expression(*c / r2), Expression(upscale), Expression(upscale), h, w}) split.push_back(e);
  GraphTensor x = reshape(split);  // (.., C, r, r, H, W) -> (.., C, H, r, W, r)
  std::vector<int> perm;
  for (int i = 0; i < b; ++i) perm.push_back(i);
  perm.insert(perm.end(), {b, b + 3, b + 1, b + 4, b + 2});
  Shape out = lead;
  for (Expression e : {Expression(*c / r2), h * upscale, w * upscale}) out.push_back(e);
  return x.permute(perm).reshape(out);
}

GraphTensor GraphTensor::pixel_unshuffle(int downscale) const {
  UserOpScope user_op("pixel_unshuffle");
  LUMINAL_CHECK(rank() >= 3 && downscale > 0, "pixel_unshuffle: expected (*, C, H*r, W*r) and r > 0, got ",
                to_string(shape()), " and r = ", downscale);
  auto h = dim(-2).as_constant(), w = dim(-1).as_constant();
  LUMINAL_CHECK(h && w && *h % downscale == 0 && *w % downscale == 0, "pixel_unshuffle: spatial size ",
                to_string(shape()), " not divisible by ", downscale);
  Shape full_shape = shape();
  Shape lead(full_shape.begin(), full_shape.end() - 3);
  Expression c = dim(-3);
  int b = static_cast<int>(lead.size());
  Shape split = lead;
  for (Expression e : {c, Expression(*h / downscale), Expression(downscale), Expression(*w / downscale), Expression(downscale)})
    split.push_back(e);
  GraphTensor x = reshape(split);  // (.., C, H, r, W, r) -> (.., C, r, r, H, W)
  std::vector<int> perm;
  for (int i = 0; i < b; ++i) perm.push_back(i);
  perm.insert(perm.end(), {b, b + 2, b + 4, b + 1, b + 3});
  Shape out = lead;
  for (Expression e : {c * (int64_t{downscale} * downscale), Expression(*h / downscale), Expression(*w / downscale)})
    out.push_back(e);
  return x.permute(perm).reshape(out);
}

}  // namespace luminal
