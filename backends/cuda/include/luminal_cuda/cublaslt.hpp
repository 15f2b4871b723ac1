// cuBLASLt matmuls in every operand layout: D[m, n] = act(alpha * A[m, k] B[k, n] + bias[n])
// (+ beta * D), each of A, B, D row- or column-major with any leading dimension, strided
// batched, in F32, TF32, F16 and BF16 with fp32 accumulation. A spec is prepared once
// (descriptors and the heuristic's algorithm, cached per spec) and then only re-enqueued,
// which also works inside stream capture (CUDA graphs).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "luminal/dtype.hpp"
#include "luminal_cuda/device.hpp"
#include "luminal_cuda/kernels.hpp"

namespace luminal::cuda {

enum class Order { RowMajor, ColMajor };

struct MatrixLayout {
  Order order = Order::RowMajor;
  int64_t ld = 0;            // leading dimension in elements; 0: packed
  int64_t batch_stride = 0;  // elements between batch entries; 0: packed
};

struct MatmulSpec {
  DType dtype = DType::BF16;  // of A, B, D and bias (F32, F16 or BF16)
  bool tf32 = false;          // F32 only: TF32 tensor cores
  int64_t m = 0, n = 0, k = 0;
  int64_t batch = 1;
  MatrixLayout a, b, d;
  bool bias = false;  // bias[n] added to every row of D; needs a row-major D
  Activation act = Activation::None;  // None, Relu or GeluTanh (cuBLASLt has no SiLU epilogue)
  float alpha = 1.0f, beta = 0.0f;

  std::string key() const;  // identifies a prepared plan
};

// Whether cuBLASLt can run `spec`; when not, `why` says why. launch-time checks match.
bool cublaslt_supports(const MatmulSpec& spec, std::string* why = nullptr);

class CublasLt {
 public:
  // Needs a current context; throws luminal::Error when cuBLASLt cannot be loaded.
  // `l2_bytes`, the device's L2 (DeviceInfo::l2_bytes): autotuning then times every run on
  // operands the L2 does not hold, as a model reads each weight once per step (0: one set
  // of operands, read again from the L2).
  explicit CublasLt(size_t workspace_bytes = 32u << 20, size_t l2_bytes = 0);
  ~CublasLt();
  CublasLt(const CublasLt&) = delete;
  CublasLt& operator=(const CublasLt&) = delete;

  struct Plan;
  // Descriptors and algorithm for a spec, built on first use and cached.
  const Plan& prepare(const MatmulSpec& spec);
  // Enqueue a prepared plan on `stream`. `bias` must be set iff the spec has a bias.
  void enqueue(const Plan& plan, DevicePtr a, DevicePtr b, DevicePtr d, DevicePtr bias, StreamHandle stream);
  void matmul(const MatmulSpec& spec, DevicePtr a, DevicePtr b, DevicePtr d, DevicePtr bias, StreamHandle stream) {
    enqueue(prepare(spec), a, b, d, bias, stream);
  }
  size_t prepared_count() const { return plans_.size(); }
  // Plans whose algorithm was chosen by timing the heuristic's candidates (see prepare).
  size_t autotuned_count() const { return autotuned_; }

 private:
  api::cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  std::map<std::string, std::unique_ptr<Plan>> plans_;
  size_t autotuned_ = 0;
  size_t l2_bytes_ = 0;
  // Index of the fastest of `found` candidates for `plan`, timed on scratch operands; 0
  // when none could be timed.
  int fastest(const Plan& plan, const api::cublasLtMatmulHeuristicResult_t* candidates, int found);
};

}  // namespace luminal::cuda
