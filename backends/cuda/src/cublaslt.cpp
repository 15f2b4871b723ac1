#include "luminal_cuda/cublaslt.hpp"

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "luminal/error.hpp"
#include "luminal_cuda/device.hpp"

namespace luminal::cuda {

namespace {

int cuda_data_type(DType dtype) {
  switch (dtype) {
    case DType::F32: return api::CUDA_R_32F;
    case DType::F16: return api::CUDA_R_16F;
    case DType::BF16: return api::CUDA_R_16BF;
    default: fail("cuBLASLt matmul takes F32, F16 or BF16, not ", dtype_name(dtype));
  }
}

// A logical matrix [rows, cols] as cuBLASLt sees it: cuBLASLt is column-major, so a
// row-major matrix is its transpose's column-major view.
struct Operand {
  int op = api::CUBLAS_OP_N;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0, batch_stride = 0;
};

int64_t packed_ld(const MatrixLayout& l, int64_t rows, int64_t cols) {
  return l.ld ? l.ld : (l.order == Order::RowMajor ? cols : rows);
}
int64_t packed_stride(const MatrixLayout& l, int64_t rows, int64_t cols) {
  return l.batch_stride ? l.batch_stride : rows * cols;
}

// The column-major operand holding X (transposed = false) or X^T (transposed = true),
// where X is the logical [rows, cols] matrix stored with layout `l`.
Operand operand(const MatrixLayout& l, int64_t rows, int64_t cols, bool transposed) {
  Operand o;
  o.ld = packed_ld(l, rows, cols);
  o.batch_stride = packed_stride(l, rows, cols);
  // Stored as col-major [rows, cols] (col-major X) or col-major [cols, rows] (row-major X).
  const bool stored_is_x = l.order == Order::ColMajor;
  o.rows = static_cast<uint64_t>(stored_is_x ? rows : cols);
  o.cols = static_cast<uint64_t>(stored_is_x ? cols : rows);
  o.op = stored_is_x == transposed ? api::CUBLAS_OP_T : api::CUBLAS_OP_N;
  return o;
}

void check_layout(const char* name, const MatrixLayout& l, int64_t rows, int64_t cols, int64_t batch) {
  const int64_t minimum_ld = l.order == Order::RowMajor ? cols : rows;
  LUMINAL_CHECK(l.ld == 0 || l.ld >= minimum_ld, "matmul ", name, ": leading dimension ", l.ld, " is below ",
                minimum_ld, " for a ", l.order == Order::RowMajor ? "row" : "column", "-major ", rows, "x", cols,
                " matrix");
  LUMINAL_CHECK(batch == 1 || l.batch_stride >= 0, "matmul ", name, ": negative batch stride");
}

uint32_t epilogue(const MatmulSpec& s) {
  switch (s.act) {
    case Activation::None: return s.bias ? api::CUBLASLT_EPILOGUE_BIAS : api::CUBLASLT_EPILOGUE_DEFAULT;
    case Activation::Relu: return s.bias ? api::CUBLASLT_EPILOGUE_RELU_BIAS : api::CUBLASLT_EPILOGUE_RELU;
    case Activation::GeluTanh: return s.bias ? api::CUBLASLT_EPILOGUE_GELU_BIAS : api::CUBLASLT_EPILOGUE_GELU;
    default: return 0;
  }
}

// Heuristic candidates timed per plan, timed runs of each, and the scratch operands'
// limit (autotuning).
constexpr int kAutotuneCandidates = 8;
constexpr int kAutotuneRuns = 3;
constexpr size_t kAutotuneMaxBytes = size_t(256) << 20;
constexpr size_t kAutotuneMaxScratch = size_t(512) << 20;  // all the operand copies
bool autotune_from_env() {
  const char* v = std::getenv("LUMINAL_CUBLASLT_AUTOTUNE");
  return !(v && std::string_view(v) == "0");
}

}  // namespace

std::string MatmulSpec::key() const {
  auto layout = [](const MatrixLayout& l) {
    return detail::concat(l.order == Order::RowMajor ? 'R' : 'C', l.ld, '/', l.batch_stride);
  };
  return detail::concat(dtype_name(dtype), tf32 ? "tf32" : "", ' ', m, 'x', n, 'x', k, " b", batch, ' ', layout(a), ' ',
                        layout(b), ' ', layout(d), bias ? " bias" : "", ' ', activation_name(act), ' ', alpha, ' ', beta);
}

bool cublaslt_supports(const MatmulSpec& s, std::string* why) {
  auto no = [&](std::string reason) {
    if (why) *why = std::move(reason);
    return false;
  };
  if (s.dtype != DType::F32 && s.dtype != DType::F16 && s.dtype != DType::BF16)
    return no(detail::concat("dtype ", dtype_name(s.dtype), " (F32, F16 or BF16 only)"));
  if (s.tf32 && s.dtype != DType::F32) return no("TF32 applies to F32 inputs only");
  if (s.m <= 0 || s.n <= 0 || s.k <= 0 || s.batch <= 0)
    return no(detail::concat("empty problem ", s.m, "x", s.n, "x", s.k, " batch ", s.batch));
  if (s.act == Activation::Silu) return no("cuBLASLt has no SiLU epilogue");
  if (s.bias && s.d.order != Order::RowMajor) return no("a bias over columns needs a row-major D");
  return true;
}

struct CublasLt::Plan {
  MatmulSpec spec;
  bool swapped = false;  // D row-major: computed as D^T = B^T A^T
  api::cublasLtMatmulDesc_t desc = nullptr;
  api::cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  api::cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  ~Plan() {
    const api::CublasLtTable& lt = api::cublaslt_table();
    if (a) lt.cublasLtMatrixLayoutDestroy(a);
    if (b) lt.cublasLtMatrixLayoutDestroy(b);
    if (d) lt.cublasLtMatrixLayoutDestroy(d);
    if (desc) lt.cublasLtMatmulDescDestroy(desc);
  }
};

CublasLt::CublasLt(size_t workspace_bytes, size_t l2_bytes) : workspace_(workspace_bytes), l2_bytes_(l2_bytes) {
  LUMINAL_CUBLASLT(cublasLtCreate, &handle_);
}

CublasLt::~CublasLt() {
  plans_.clear();
  if (handle_) api::cublaslt_table().cublasLtDestroy(handle_);
}

const CublasLt::Plan& CublasLt::prepare(const MatmulSpec& s) {
  const std::string key = s.key();
  if (auto it = plans_.find(key); it != plans_.end()) return *it->second;
  std::string why;
  LUMINAL_CHECK(cublaslt_supports(s, &why), "cuBLASLt cannot run matmul ", key, ": ", why);
  check_layout("A", s.a, s.m, s.k, s.batch);
  check_layout("B", s.b, s.k, s.n, s.batch);
  check_layout("D", s.d, s.m, s.n, s.batch);

  auto plan = std::make_unique<Plan>();
  plan->spec = s;
  plan->swapped = s.d.order == Order::RowMajor;
  // Column-major problem D' = op(A') op(B'): D' is D (col-major D) or D^T (row-major D).
  Operand first, second, out;
  if (plan->swapped) {
    first = operand(s.b, s.k, s.n, /*transposed=*/true);   // B^T: [n, k]
    second = operand(s.a, s.m, s.k, /*transposed=*/true);  // A^T: [k, m]
    out = operand(s.d, s.m, s.n, /*transposed=*/true);     // D^T: [n, m], stored as is
  } else {
    first = operand(s.a, s.m, s.k, false);
    second = operand(s.b, s.k, s.n, false);
    out = operand(s.d, s.m, s.n, false);
  }
  const int type = cuda_data_type(s.dtype);
  const int compute = s.tf32 ? api::CUBLAS_COMPUTE_32F_FAST_TF32 : api::CUBLAS_COMPUTE_32F;
  LUMINAL_CUBLASLT(cublasLtMatmulDescCreate, &plan->desc, compute, api::CUDA_R_32F);
  LUMINAL_CUBLASLT(cublasLtMatmulDescSetAttribute, plan->desc, api::CUBLASLT_MATMUL_DESC_TRANSA, &first.op,
                   sizeof(first.op));
  LUMINAL_CUBLASLT(cublasLtMatmulDescSetAttribute, plan->desc, api::CUBLASLT_MATMUL_DESC_TRANSB, &second.op,
                   sizeof(second.op));
  const uint32_t epi = epilogue(s);
  LUMINAL_CUBLASLT(cublasLtMatmulDescSetAttribute, plan->desc, api::CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi));

  // The stored (pre-op) shapes of each operand.
  auto make_layout = [&](api::cublasLtMatrixLayout_t& layout, const Operand& o) {
    LUMINAL_CUBLASLT(cublasLtMatrixLayoutCreate, &layout, type, o.rows, o.cols, o.ld);
    if (s.batch > 1) {
      const int32_t count = static_cast<int32_t>(s.batch);
      LUMINAL_CUBLASLT(cublasLtMatrixLayoutSetAttribute, layout, api::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                       sizeof(count));
      LUMINAL_CUBLASLT(cublasLtMatrixLayoutSetAttribute, layout, api::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                       &o.batch_stride, sizeof(o.batch_stride));
    }
  };
  make_layout(plan->a, first);
  make_layout(plan->b, second);
  // D takes no op: its rows and cols above are already those of the stored matrix.
  make_layout(plan->d, out);

  api::cublasLtMatmulPreference_t preference = nullptr;
  LUMINAL_CUBLASLT(cublasLtMatmulPreferenceCreate, &preference);
  struct DestroyPreference {
    api::cublasLtMatmulPreference_t p;
    ~DestroyPreference() { api::cublaslt_table().cublasLtMatmulPreferenceDestroy(p); }
  } destroy{preference};
  const uint64_t max_workspace = workspace_.bytes();
  LUMINAL_CUBLASLT(cublasLtMatmulPreferenceSetAttribute, preference, api::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                   &max_workspace, sizeof(max_workspace));
  // The heuristic's first choice is often far from the best for skinny or small-batch
  // shapes: a 512 x 1024 x 4096 BF16 product (a prefill's k or v projection) ran at ~90
  // TFLOPS on the H200, a tile grid of 16 blocks on 132 SMs. So its top candidates are
  // timed once, on scratch operands, and the fastest kept (LUMINAL_CUBLASLT_AUTOTUNE=0:
  // the first).
  api::cublasLtMatmulHeuristicResult_t results[kAutotuneCandidates] = {};
  int found = 0;
  LUMINAL_CUBLASLT(cublasLtMatmulAlgoGetHeuristic, handle_, plan->desc, plan->a, plan->b, plan->d, plan->d,
                   preference, kAutotuneCandidates, results, &found);
  LUMINAL_CHECK(found > 0, "cuBLASLt found no algorithm for matmul ", key);
  int best = 0;
  if (found > 1 && autotune_from_env()) {
    best = fastest(*plan, results, found);
    ++autotuned_;
  }
  plan->algo = results[best].algo;
  plan->workspace = results[best].workspaceSize;
  return *plans_.emplace(key, std::move(plan)).first->second;
}

int CublasLt::fastest(const Plan& plan, const api::cublasLtMatmulHeuristicResult_t* candidates, int found) {
  const MatmulSpec& s = plan.spec;
  const size_t elem = dtype_bytes(s.dtype);
  // Bytes each stored operand spans (column-major [rows, cols] with its ld, batched).
  auto span = [&](const MatrixLayout& l, int64_t rows, int64_t cols) {
    const Operand o = operand(l, rows, cols, false);
    const int64_t stored_cols = static_cast<int64_t>(o.cols);
    return static_cast<size_t>(((s.batch - 1) * o.batch_stride + o.ld * stored_cols) * static_cast<int64_t>(elem));
  };
  const size_t a_bytes = span(s.a, s.m, s.k), b_bytes = span(s.b, s.k, s.n), d_bytes = span(s.d, s.m, s.n);
  // Large products are compute-bound, where the heuristic's choice is sound; their scratch
  // copies would cost more than the timing saves.
  if (a_bytes + b_bytes + d_bytes > kAutotuneMaxBytes) return 0;
  // Operand copies, rotated over every run of every candidate, enough that the copy a run
  // reads was last touched an L2's worth of bytes before: a model reads a weight once per
  // step, and timed from the L2 the candidates nearly tie, so the pick was noise (a 512 x
  // 1024 x 4096 BF16 product ran at 11.1 us in session 16 and 16.7 in session 20 on the
  // same H100 type, where PyTorch's took 11.0).
  auto aligned = [](size_t bytes) { return (std::max<size_t>(bytes, 16) + 255) / 256 * 256; };
  const size_t a_off = 0, b_off = aligned(a_bytes), d_off = b_off + aligned(b_bytes);
  const size_t set_bytes = d_off + aligned(d_bytes);
  size_t sets = l2_bytes_ == 0 ? 1 : l2_bytes_ / set_bytes + 2;
  sets = std::clamp<size_t>(std::min(sets, kAutotuneMaxScratch / set_bytes), 1, 64);
  Stream stream;
  DeviceBuffer scratch(sets * set_bytes), bias(std::max<size_t>(s.bias ? static_cast<size_t>(s.n) * elem : 0, 16));
  for (const DeviceBuffer* buf : {&scratch, &bias})
    LUMINAL_CU(cuMemsetD8Async, buf->ptr(), 0, buf->bytes(), stream.get());
  const api::CublasLtTable& lt = api::cublaslt_table();
  if (s.bias) {
    const DevicePtr bp = bias.ptr();
    LUMINAL_CUBLASLT(cublasLtMatmulDescSetAttribute, plan.desc, api::CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof(bp));
  }
  auto ptr = [](DevicePtr p) { return reinterpret_cast<void*>(static_cast<uintptr_t>(p)); };
  size_t turn = 0;  // the next copy
  Event start, end;
  int best = -1;  // none timed yet
  double best_ms = 0;
  for (int c = 0; c < found; ++c) {
    if (candidates[c].workspaceSize > workspace_.bytes()) continue;
    auto run = [&] {
      const DevicePtr base = scratch.ptr() + static_cast<DevicePtr>(turn++ % sets * set_bytes);
      void* a = ptr(base + a_off);
      void* b = ptr(base + b_off);
      void* d = ptr(base + d_off);
      return lt.cublasLtMatmul(handle_, plan.desc, &s.alpha, plan.swapped ? b : a, plan.a, plan.swapped ? a : b,
                               plan.b, &s.beta, d, plan.d, d, plan.d, &candidates[c].algo, ptr(workspace_.ptr()),
                               candidates[c].workspaceSize, stream.get());
    };
    if (run() != api::CUBLAS_STATUS_SUCCESS) continue;  // warm-up; a candidate that refuses is skipped
    double ms = 0;
    for (int rep = 0; rep < kAutotuneRuns; ++rep) {
      start.record(stream.get());
      run();
      end.record(stream.get());
      end.synchronize();
      const double t = Event::elapsed_ms(start, end);
      ms = rep == 0 ? t : std::min(ms, t);
    }
    if (best < 0 || ms < best_ms) {
      best = c;
      best_ms = ms;
    }
  }
  stream.synchronize();
  return std::max(best, 0);  // none ran: the heuristic's first, whose error the real call reports
}

void CublasLt::enqueue(const Plan& plan, DevicePtr a, DevicePtr b, DevicePtr d, DevicePtr bias, StreamHandle stream) {
  LUMINAL_CHECK(a && b && d, "cuBLASLt matmul needs A, B and D device pointers");
  LUMINAL_CHECK(plan.spec.bias == (bias != 0), "cuBLASLt matmul ", plan.spec.key(),
                plan.spec.bias ? " needs a bias pointer" : " was prepared without a bias");
  if (plan.spec.bias) {
    // The bias pointer is the one descriptor field that changes per call.
    LUMINAL_CUBLASLT(cublasLtMatmulDescSetAttribute, plan.desc, api::CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                     sizeof(bias));
  }
  const void* first = reinterpret_cast<const void*>(static_cast<uintptr_t>(plan.swapped ? b : a));
  const void* second = reinterpret_cast<const void*>(static_cast<uintptr_t>(plan.swapped ? a : b));
  void* out = reinterpret_cast<void*>(static_cast<uintptr_t>(d));
  note_launch(&plan);  // its algorithm, fixed when prepared, decides the kernels
  LUMINAL_CUBLASLT(cublasLtMatmul, handle_, plan.desc, &plan.spec.alpha, first, plan.a, second, plan.b,
                   &plan.spec.beta, out, plan.d, out, plan.d, &plan.algo,
                   reinterpret_cast<void*>(static_cast<uintptr_t>(workspace_.ptr())), plan.workspace, stream);
}

}  // namespace luminal::cuda
