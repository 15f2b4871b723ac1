// Regions whose CUDA kernels are run (on a GPU, or under the CPU emulation of the CUDA
// execution model) and compared with the reference: warp-per-row reductions with rows
// longer than a warp, lane-strided columns, elementwise kernels, the single-block Scatter.
#pragma once

#include "luminal/kernel/nvrtc.hpp"

#include "harness.hpp"

namespace luminal::kernel::testing {

struct CudaCase {
  std::string name;
  Region region;
  std::vector<DimMap> dims;
  std::function<HostTensor(size_t, DType, size_t, std::mt19937&)> data;
};

// Launch `kernel` with `buffers` (inputs, output, error record of kErrorWords int32; host memory, filled in
// place) and `dims`.
using CudaLauncher = std::function<void(const Kernel& kernel, const std::string& source,
                                        std::vector<std::pair<void*, size_t>>& buffers, std::vector<long long>& dims)>;

inline HostTensor plain_values(size_t, DType dt, size_t n, std::mt19937& rng) { return random_tensor(dt, n, rng, false, false); }

inline std::vector<CudaCase> cuda_cases() {
  const Expression seq = Expression::var("seq");
  const std::vector<DimMap> dims = {{{"seq", 5}}, {{"seq", 37}}};
  std::vector<CudaCase> cases;
  auto add = [&](std::string name, Graph g, std::function<HostTensor(size_t, DType, size_t, std::mt19937&)> data = {}) {
    cases.push_back({std::move(name), Region{std::move(g)}, dims, std::move(data)});
  };
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    std::string d(dtype_name(dt));
    {
      Graph cx;
      cx.tensor({seq, 100}, dt).softmax(1).output();
      add("softmax " + d, cx, plain_values);
    }
    {
      Graph cx;
      auto x = cx.tensor({seq, 70}, dt);
      x.layer_norm(1, cx.tensor({70}, dt), cx.tensor({70}, dt)).output();
      add("layer norm " + d, cx, plain_values);
    }
    {
      Graph cx;
      auto x = cx.tensor({seq, 33}, dt);
      auto xt = cx.tensor({33, seq}, dt).permute({1, 0});
      ((x * 1.5).exp2() + xt.sin() - x.sqrt()).pad(1, 2, 1).output();
      add("elementwise " + d, cx);
    }
  }
  // Rows of 1024 or more elements, or of a run-time length: a block per row (Geometry::BlockPerRow), its threads
  // splitting the reductions and columns; odd lengths, so the last pass is partial.
  for (DType dt : {DType::F32, DType::BF16}) {
    std::string d(dtype_name(dt));
    {
      Graph cx;
      auto x = cx.tensor({seq, 1500}, dt);
      x.layer_norm(1, cx.tensor({1500}, dt), cx.tensor({1500}, dt)).output();
      add("long-row layer norm " + d, cx, plain_values);
    }
    {
      Graph cx;
      cx.tensor({seq, 1031}, dt).softmax(1).output();
      add("long-row softmax " + d, cx);
    }
    {
      // A reduction over a run-time length (attention over a KV cache) counts as long.
      Graph cx;
      ((cx.tensor({3, seq}, dt) * 0.5).softmax(1) + 1.0).output();
      add("long-row softmax over a run-time length " + d, cx);
    }
  }
  {
    Graph cx;
    NodeInput x = viewed_input(cx, DType::I32, ViewKind::Permute, seq, 1100);
    add_output(cx, add_op(cx, OpKind::MaxReduce, DType::I32, {seq}, {x}, 1));
    add("long-row integer max", cx);
  }
  for (DType dt : kAllDTypes)
    for (OpKind op : {OpKind::SumReduce, OpKind::MaxReduce}) {
      Graph cx;
      NodeInput x = viewed_input(cx, dt, ViewKind::Permute, seq, 45);
      add_output(cx, add_op(cx, op, dt, {seq}, {x}, 1));
      add(std::string(op_name(op)) + " " + std::string(dtype_name(dt)), cx);
    }
  // Inputs read at the element's own index: 16-byte loads and stores through registers
  // (cuda_vector_width), of mixed element sizes (a BF16 output with an F32 input: 8
  // elements per thread, two copies of the F32 one), beside a broadcast read and a
  // transposed one that stay scalar. 5 x 37 and 37 x 37 elements leave partial chunks.
  for (DType dt : {DType::F32, DType::BF16}) {
    Graph cx;
    auto x = cx.tensor({seq, 37}, dt);
    auto y = cx.tensor({seq, 37}, DType::F32);
    auto bias = cx.tensor({37}, dt);
    auto xt = cx.tensor({37, seq}, dt).permute({1, 0});
    ((x * y.cast(dt)).silu() + bias - xt).output();
    add("flat " + std::string(dtype_name(dt)), cx);
  }
  {
    // Reads contiguous in runs but not at the element's index (a head-major view of a
    // [seq, heads, 16] tensor, a table broadcast over heads, RoPE's shape): 16-byte copies
    // per chunk where the run is aligned, element by element where it is not (seq odd).
    Graph cx;
    auto x = cx.tensor({seq, 3, 16}, DType::BF16).permute({1, 0, 2});
    auto table = cx.tensor({seq, 16}, DType::BF16);
    (x * table.unsqueeze(0) + x.sin()).output();
    add("chunked transposed BF16", cx);
  }
  {
    // RoPE's rotation: x * cos + cat(-x2, x1) * sin over a head-major view. The halves are
    // padded reads, guarded by `col % 32 < 16` and its complement: whole chunks of 8 on
    // either side, so each chunk reads its half only where the guard holds.
    Graph cx;
    auto x = cx.tensor({seq, 2, 32}, DType::BF16).permute({1, 0, 2});
    auto cos = cx.tensor({seq, 32}, DType::BF16).unsqueeze(0);
    auto sin = cx.tensor({seq, 32}, DType::BF16).unsqueeze(0);
    auto rotated = GraphTensor::concat({x.slice(2, 16, 32) * -1.0, x.slice(2, 0, 16)}, 2);
    (x * cos + rotated * sin).output();
    add("chunked rope BF16", cx);
  }
  {
    // A norm whose rows start misaligned for every odd row (24 F32 columns: 96 bytes) and
    // whose weight is read contiguously: whole chunks and a partial one per row.
    Graph cx;
    auto x = cx.tensor({seq, 24});
    x.rms_norm(1, cx.tensor({24}), 1e-5).output();
    add("chunked rms norm F32", cx, plain_values);
  }
  {
    // A run-time inner dim of the output: its coordinates divide the flat index by seq
    // (an invariant divisor: CUDA divides by a multiply, Kernel: invariant_divisors).
    Graph cx;
    ((cx.tensor({seq, 7}).permute({1, 0}) * 1.5).sin() + cx.tensor({7, seq})).output();
    add("transposed, run-time inner dim", cx);
  }
  {
    Graph cx;
    cx.tensor({4, seq, 9}).mean({1, 2}).output();
    add("mean over two axes", cx, plain_values);
  }
  {
    Graph cx;
    auto x = cx.tensor({seq, 40});
    (x / x.sum_all()).output();
    add("x / sum(x)", cx, plain_values);
  }
  {
    Graph cx;
    auto table = cx.tensor({9, 40});
    auto ids = cx.tensor({seq, 40}, DType::I64);
    ((table.gather(0, ids) * 3.0) + 1.0).output();
    add("gather", cx, [](size_t input, DType t, size_t n, std::mt19937& rng) {
      if (input == 0) return random_tensor(t, n, rng);
      HostTensor h = HostTensor::zeros(t, n);
      for (size_t i = 0; i < n; ++i) h.set_i64(i, static_cast<int64_t>(rng() % 9));
      return h;
    });
  }
  {
    Graph g;
    NodeInput dest{add_input(g, DType::F32, {seq, 4}), ShapeTracker::contiguous({seq, 4})};
    NodeInput idx{add_input(g, DType::I32, {5}), ShapeTracker::contiguous({5})};
    NodeInput src{add_input(g, DType::F32, {5}), ShapeTracker::contiguous({5})};
    add_output(g, add_op(g, OpKind::Scatter, DType::F32, {seq, 4}, {dest, idx, src}));
    add("scatter", g, [](size_t input, DType t, size_t n, std::mt19937& rng) {
      if (input != 1) return random_tensor(t, n, rng);
      HostTensor h = HostTensor::zeros(t, n);
      for (size_t i = 0; i < n; ++i) h.set_i64(i, static_cast<int64_t>(i * 3 + 2));
      return h;
    });
  }
  return cases;
}

inline void run_cuda_cases(const CudaLauncher& launch) {
  for (const auto& c : cuda_cases()) {
    SCOPED_TRACE(c.name);
    auto k = lower(c.region);
    ASSERT_TRUE(k);
    if (c.name.rfind("long-row", 0) == 0) {
      EXPECT_EQ(k->geometry, Geometry::BlockPerRow);
    }
    std::string source = emit_cuda(*k, "lm_kernel");
    if (c.name.rfind("flat ", 0) == 0) {
      // x and y are read at the element's index; the BF16 output takes 8 per thread.
      EXPECT_EQ(cuda_vector_width(*k), c.name == "flat BF16" ? 8 : 4) << to_string(*k);
      EXPECT_NE(source.find("LM_COPY16(&lm_x"), std::string::npos) << source;
    }
    // Row kernels over 16-bit or F32 rows take 16-byte chunks of them (cuda_row_chunk_width);
    // the transposed case reads its runs into registers.
    if (c.name == "softmax BF16" || c.name == "long-row softmax BF16") {
      EXPECT_EQ(cuda_row_chunk_width(*k), 8) << to_string(*k);
    }
    if (c.name == "chunked rms norm F32" || c.name == "layer norm F32") {
      EXPECT_EQ(cuda_row_chunk_width(*k), 4) << to_string(*k);
    }
    if (c.name == "chunked transposed BF16" || c.name == "chunked rope BF16") {
      EXPECT_NE(source.find("alignas(16) unsigned short lm_c"), std::string::npos) << source;
    }
    if (c.name == "chunked rope BF16") {  // both halves: guarded chunks, zeros where the guard fails
      size_t guarded = 0;
      for (size_t at = source.find("lm_k] = 0;"); at != std::string::npos; at = source.find("lm_k] = 0;", at + 1)) ++guarded;
      EXPECT_EQ(guarded, 2u) << source;
    }
    // NVRTC needs no GPU: the real compiler checks what the emulation runs.
    if (nvrtc::available()) {
      EXPECT_NO_THROW(nvrtc::compile(source, "lm_kernel", "sm_90"));
    }
    const Graph& g = c.region.graph;
    std::mt19937 rng(7);
    for (const DimMap& dims : c.dims) {
      std::vector<HostTensor> data;
      for (NodeId in : g.inputs()) {
        const Node& n = g.node(in);
        auto numel = static_cast<size_t>(product(n.shape).eval(dims));
        data.push_back(c.data ? c.data(data.size(), n.dtype, numel, rng) : random_tensor(n.dtype, numel, rng));
      }
      ReferenceRuntime ref;
      std::vector<NodeId> ids(g.size());
      for (NodeId i = 0; i < g.size(); ++i) ids[i] = i;
      ref.load_plans({Runtime::Plan{{}, g, ids}});
      for (size_t i = 0; i < data.size(); ++i) ref.set_tensor(g.inputs()[i], data[i]);
      ref.execute(dims);
      HostTensor want = ref.get_tensor(g.outputs()[0]);

      // Each buffer at a 16-byte boundary, then one element past it: a vectorized kernel
      // takes its scalar loop when any pointer is not 16-byte aligned (external pointers).
      for (size_t shift : {size_t{0}, size_t{1}}) {
        SCOPED_TRACE(shift ? "buffers one element past 16-byte alignment" : "aligned buffers");
        HostTensor got = HostTensor::zeros(k->output, static_cast<size_t>(k->output_numel.eval(dims)));
        int32_t error[kErrorWords] = {};
        std::vector<std::vector<std::byte>> storage;
        std::vector<std::pair<void*, size_t>> buffers;
        auto place = [&](const HostTensor& t) {
          const size_t offset = shift * dtype_bytes(t.dtype);
          storage.emplace_back(t.bytes.size() + 32);
          auto* base = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(storage.back().data()) + 15) & ~uintptr_t{15});
          std::copy(t.bytes.begin(), t.bytes.end(), base + offset);
          buffers.emplace_back(base + offset, t.bytes.size());
        };
        for (auto& t : data) place(t);
        place(got);
        buffers.emplace_back(error, sizeof error);
        std::vector<long long> dim_values;
        for (const auto& e : cuda_dims_entries(*k)) dim_values.push_back(e.eval(dims));
        launch(*k, source, buffers, dim_values);
        auto* out = static_cast<const std::byte*>(buffers[data.size()].first);
        std::copy(out, out + got.bytes.size(), got.bytes.begin());
        EXPECT_EQ(error[0], 0);
        EXPECT_EQ(compare(got, want), "") << "seq=" << dims.at("seq") << "\n" << to_string(*k);
      }
    }
  }
}

}  // namespace luminal::kernel::testing
