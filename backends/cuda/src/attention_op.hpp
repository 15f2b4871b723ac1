// The CudaAttention op (rules/cuda_attention.egg): attention as one kernel
// (kernels/attention_rows.cu). Its operands and how it reads them:
//   (CudaAttention dtype shape q view-q k view-k v view-v mask view-mask scale view-scale)
// view-q and view-k read q and k at the shape of the scores' Mul, [batch, rows, keys, depth]
// (a matmul's A and B, as CudaGemv takes them); view-v reads v at the output's Mul,
// [batch, rows, width, keys]; view-mask and view-scale read two F32 tensors at the scores'
// shape [batch, group, seq, keys], where rows = group * seq (row r is query head r / seq of
// the group, query position r % seq). The result is [batch, rows, width], contiguous.
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "luminal/egraph/egraph.hpp"
#include "luminal/kernel/program_kernels.hpp"
#include "luminal/shape.hpp"

namespace luminal::cuda {

// The matmul layouts this backend runs (defined in cuda_runtime.cpp).
std::optional<kernel::GemmLayout> cuda_gemm_layout(const ShapeTracker& va, const ShapeTracker& vb);

struct AttentionLayout {
  Expression batch, rows, group, seq, keys, depth, width;
  kernel::GemmOperand q, k, v;  // q: rows x depth; k: depth x keys; v: keys x width (row, col strides)
  // Linear strides of the mask and the scale over [batch, group, seq, keys], and offsets.
  Expression mask_offset, scale_offset;
  std::vector<Expression> mask_strides, scale_strides;
};

// The layout of an attention whose operands are read through these views; nullopt when
// the kernel cannot take it (an operand that is not a linear view, depth or width not a
// constant up to kAttentionRowsMaxDepth, rows other than group * seq).
std::optional<AttentionLayout> attention_layout(const ShapeTracker& view_q, const ShapeTracker& view_k,
                                                const ShapeTracker& view_v, const ShapeTracker& view_mask,
                                                const ShapeTracker& view_scale);

// LUMINAL_CUDA_ATTENTION: unset or "0" leaves rules/cuda_attention.egg out (Off: the
// default, until the op is measured faster in the models); "prefill" offers the op and
// seeds the search with it where it runs on tensor cores (Prefill); "1" also seeds a decode
// step's (Everywhere). Anything else is an error naming the variable.
enum class AttentionMode { Off, Prefill, Everywhere };
AttentionMode attention_mode();

// Extraction's cost of a CudaAttention writing [batch, rows, width] (Runtime::backend_op_cost).
// From kAttentionFlashRows rows a batch, at width 64 or 128, it runs on tensor cores
// (kernels/attention_flash.cu): nullopt, so it seeds a prefill's search. Other wide shapes
// take the decode kernel (every key read once per row, no tensor cores), far slower than
// the two matmuls there: a cost above any program's, so they never seed a search (the
// search may still draw and measure them). A decode step's few rows: nullopt under
// AttentionMode::Everywhere, else that cost (in the 8B decode step it only tied the
// matmuls and the softmax, session 24).
std::optional<double> attention_cost(std::span<const int64_t> shape);

// (cuda-attention ...), the rule's guard: see rules/cuda_attention.egg.
void register_attention_primitives(egraph::EGraph& eg);

}  // namespace luminal::cuda
