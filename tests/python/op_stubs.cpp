// Weak fallbacks for tensor ops that may not be implemented yet in the library, so the
// runner links regardless: a strong definition in libluminal (linked whole-archive)
// always wins; without one, the case reports "not implemented" instead of failing to link.
#include "luminal/tensor.hpp"
#include "luminal/error.hpp"

namespace luminal {
#define LUMINAL_STUB(what) fail(what, ": not implemented in this build of luminal")

[[gnu::weak]] GraphTensor GraphTensor::argmax(int, bool) const { LUMINAL_STUB("argmax"); }
[[gnu::weak]] GraphTensor GraphTensor::argmin(int, bool) const { LUMINAL_STUB("argmin"); }
[[gnu::weak]] GraphTensor GraphTensor::cumsum(int) const { LUMINAL_STUB("cumsum"); }
[[gnu::weak]] GraphTensor GraphTensor::conv1d(const GraphTensor&, const std::optional<GraphTensor>&, int, int, int,
                                              int) const {
  LUMINAL_STUB("conv1d");
}
[[gnu::weak]] GraphTensor GraphTensor::conv2d(const GraphTensor&, const std::optional<GraphTensor>&,
                                              std::pair<int, int>, std::pair<int, int>, std::pair<int, int>,
                                              int) const {
  LUMINAL_STUB("conv2d");
}
[[gnu::weak]] GraphTensor GraphTensor::max_pool2d(std::pair<int, int>, std::pair<int, int>,
                                                  std::pair<int, int>) const {
  LUMINAL_STUB("max_pool2d");
}
[[gnu::weak]] GraphTensor GraphTensor::avg_pool2d(std::pair<int, int>, std::pair<int, int>,
                                                  std::pair<int, int>) const {
  LUMINAL_STUB("avg_pool2d");
}
[[gnu::weak]] GraphTensor GraphTensor::gather(int, const GraphTensor&) const { LUMINAL_STUB("gather"); }
[[gnu::weak]] GraphTensor GraphTensor::scatter(int, const GraphTensor&, const GraphTensor&) const {
  LUMINAL_STUB("scatter");
}
[[gnu::weak]] GraphTensor GraphTensor::index_select(int, const GraphTensor&) const { LUMINAL_STUB("index_select"); }
[[gnu::weak]] GraphTensor GraphTensor::embedding(const GraphTensor&) const { LUMINAL_STUB("embedding"); }
[[gnu::weak]] GraphTensor GraphTensor::one_hot(int64_t) const { LUMINAL_STUB("one_hot"); }
[[gnu::weak]] std::pair<GraphTensor, GraphTensor> GraphTensor::topk(int64_t, int, bool) const {
  LUMINAL_STUB("topk");
}
[[gnu::weak]] GraphTensor GraphTensor::argsort(int, bool) const { LUMINAL_STUB("argsort"); }
[[gnu::weak]] std::pair<GraphTensor, GraphTensor> GraphTensor::sort(int, bool) const { LUMINAL_STUB("sort"); }

}  // namespace luminal
