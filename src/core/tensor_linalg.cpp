// Matrix products: a broadcast Mul in [..., m, n, k] space followed by a SumReduce
// over k. Backends recognise the pair by its strides (a's n-stride and b's m-stride
// are 0) and substitute library or generated GEMMs.
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

}  // namespace luminal
