// Issue 10, benchmark case 3: one decode step of a Llama-3-8B-shaped model (BF16, batch 1,
// 512 tokens of context, random weights) compiled by luminal for the CUDA runtime (search
// included) and replayed as one CUDA graph per step. Built with the tensor API directly
// (models/ needs libraries the GPU machine lacks); the architecture is Llama 3's: RMSNorm,
// GQA attention with RoPE over a KV cache, SwiGLU MLP, tied nothing, an untied LM head.
// Weights and caches are filled on the device and bound to the runtime (zero copy).
//
// The step reads the cached keys and values and attends over them plus the new token's
// (concatenated), so it reads what a decode step reads; writing the new row into the
// cache is left out (the kernel IR's scatter copies the whole cache: see
// docs/CUDA_BACKEND.md).
//
// Prints one JSON line: TPOT (median of timed steps, host clock around execute), the floor
// (bytes read per step / device-to-device copy bandwidth measured here), the fraction of
// the floor, compile time, and the ratio against torch.compile's TPOT measured on the same
// machine for issue 10 (5.93 ms; pass --torch-ms to compare against a fresh measurement).
//
//   decode_cuda [--layers 32] [--context 512] [--search-s 30] [--steps 30] [--torch-ms 5.93] [--small 1]
// --small 1: the same architecture at toy sizes (a smoke test, e.g. under the host emulation).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "luminal/luminal.hpp"
#include "luminal_cuda/cuda_runtime.hpp"
#include "luminal_cuda/device.hpp"
#include "luminal_cuda/kernels.hpp"

#include "bench_util.hpp"

using namespace luminal;
using cuda::bench::arg;
using cuda::bench::median;
using Clock = std::chrono::steady_clock;

namespace {

struct Config {
  int64_t hidden = 4096, layers = 32, heads = 32, kv_heads = 8, head_dim = 128, ffn = 14336, vocab = 128256;
  int64_t context = 512;
};

struct Weight {
  GraphTensor t;
  float scale;
};

struct Model {
  luminal::Graph cx;
  std::vector<Weight> weights;  // every persisted input, filled on the device
  GraphTensor ids, logits;
};

GraphTensor param(Model& m, const std::string& name, const luminal::Shape& shape, float scale, DType dt = DType::BF16) {
  GraphTensor t = m.cx.named_tensor(name, shape, dt).persist();
  m.weights.push_back({t, scale});
  return t;
}

// Rotary embedding of x [1, heads, head_dim] with cos/sin [1, 1, head_dim / 2]
// (the rotate-half form of transformers' Llama).
GraphTensor rope(const GraphTensor& x, const GraphTensor& cos, const GraphTensor& sin, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  GraphTensor x1 = x.slice(2, 0, half), x2 = x.slice(2, half, head_dim);
  return GraphTensor::concat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, 2);
}

void build(Model& m, const Config& c) {
  const int64_t group = c.heads / c.kv_heads;
  m.ids = m.cx.named_tensor("ids", {1}, DType::I32).persist();
  GraphTensor embed = param(m, "embed", {c.vocab, c.hidden}, 1.0f);
  GraphTensor cos = param(m, "rope.cos", {1, 1, c.head_dim / 2}, 1.0f);
  GraphTensor sin = param(m, "rope.sin", {1, 1, c.head_dim / 2}, 1.0f);
  GraphTensor x = embed.embedding(m.ids);  // [1, hidden]
  const float w_scale = 1.0f / std::sqrt(static_cast<float>(c.hidden));
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    GraphTensor h = x.rms_norm(1, param(m, p + "input_layernorm", {c.hidden}, 1.0f), 1e-5);
    GraphTensor q = h.linear(param(m, p + "q_proj", {c.heads * c.head_dim, c.hidden}, w_scale)).reshape({1, c.heads, c.head_dim});
    GraphTensor k = h.linear(param(m, p + "k_proj", {c.kv_heads * c.head_dim, c.hidden}, w_scale))
                        .reshape({1, c.kv_heads, c.head_dim});
    GraphTensor v = h.linear(param(m, p + "v_proj", {c.kv_heads * c.head_dim, c.hidden}, w_scale))
                        .reshape({1, c.kv_heads, c.head_dim});
    q = rope(q, cos, sin, c.head_dim);
    k = rope(k, cos, sin, c.head_dim);
    GraphTensor k_cache = param(m, p + "k_cache", {c.kv_heads, c.context, c.head_dim}, 1.0f);
    GraphTensor v_cache = param(m, p + "v_cache", {c.kv_heads, c.context, c.head_dim}, 1.0f);
    GraphTensor keys = GraphTensor::concat({k_cache, k.transpose(0, 1)}, 1);    // [kv, context + 1, d]
    GraphTensor values = GraphTensor::concat({v_cache, v.transpose(0, 1)}, 1);  // [kv, context + 1, d]
    GraphTensor qg = q.reshape({c.kv_heads, group, c.head_dim});               // heads of one kv head together
    GraphTensor scores = qg.matmul(keys.t()) * (1.0 / std::sqrt(static_cast<double>(c.head_dim)));
    GraphTensor attn = scores.softmax(-1).matmul(values).reshape({1, c.heads * c.head_dim});
    x = x + attn.linear(param(m, p + "o_proj", {c.hidden, c.heads * c.head_dim}, w_scale));
    GraphTensor h2 = x.rms_norm(1, param(m, p + "post_attention_layernorm", {c.hidden}, 1.0f), 1e-5);
    GraphTensor gate = h2.linear(param(m, p + "gate_proj", {c.ffn, c.hidden}, w_scale)).silu();
    GraphTensor up = h2.linear(param(m, p + "up_proj", {c.ffn, c.hidden}, w_scale));
    x = x + (gate * up).linear(param(m, p + "down_proj", {c.hidden, c.ffn}, 1.0f / std::sqrt(static_cast<float>(c.ffn))));
  }
  x = x.rms_norm(1, param(m, "norm", {c.hidden}, 1.0f), 1e-5);
  m.logits = x.linear(param(m, "lm_head", {c.vocab, c.hidden}, w_scale)).output();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (!cuda::available().ok) {
      std::printf("{\"case\": \"llama3_8b_decode\", \"skipped\": \"no GPU (%s)\"}\n", cuda::available().message.c_str());
      return 0;
    }
    Config c;
    if (arg(argc, argv, "--small", 0) != 0) {
      c.hidden = 256, c.heads = 4, c.kv_heads = 2, c.head_dim = 64, c.ffn = 512, c.vocab = 1000, c.context = 64;
      c.layers = 2;
    }
    c.layers = static_cast<int64_t>(arg(argc, argv, "--layers", static_cast<double>(c.layers)));
    c.context = static_cast<int64_t>(arg(argc, argv, "--context", static_cast<double>(c.context)));
    const double search_s = arg(argc, argv, "--search-s", 30);
    const int steps = static_cast<int>(arg(argc, argv, "--steps", 30));
    const double torch_ms = arg(argc, argv, "--torch-ms", 5.93);

    cuda::Context context;
    cuda::Stream stream;
    cuda::ModuleCache modules(context.info().arch());

    Model m;
    build(m, c);
    auto t0 = Clock::now();
    auto rt = m.cx.compile(cuda::CudaRuntime{},
                           CompileOptions().search_time_limit(std::chrono::duration<double>(search_s)).verify(VerifyMode::Never));
    const double compile_s = std::chrono::duration<double>(Clock::now() - t0).count();

    // Weights and caches on the device, bound to the runtime without copies.
    std::vector<cuda::DeviceBuffer> buffers;
    double bytes_read = 0;
    uint32_t seed = 1;
    for (const Weight& w : m.weights) {
      const int64_t numel = w.t.numel().eval(m.cx.dim_map());
      const size_t bytes = static_cast<size_t>(numel) * dtype_bytes(w.t.dtype());
      buffers.emplace_back(bytes);
      cuda::fill_uniform(modules, w.t.dtype(), buffers.back().ptr(), numel, seed++, w.scale, stream.get());
      rt.bind_device_pointer(w.t.id(), buffers.back().ptr(), bytes);
      // A step reads every weight once, except the embedding table (one row).
      bytes_read += w.t.id() == m.weights.front().t.id() ? static_cast<double>(c.hidden) * 2 : static_cast<double>(bytes);
    }
    stream.synchronize();
    rt.set_data(m.ids, std::vector<int32_t>{static_cast<int32_t>(std::min<int64_t>(1234, c.vocab - 1))});

    // Copy bandwidth (read + written bytes per second), as suite_cuda_linear measures it.
    const double bandwidth = cuda::copy_bandwidth(stream.get());
    const double floor_ms = bytes_read / bandwidth * 1e3;

    const DimMap dims = m.cx.dim_map();
    for (int i = 0; i < 3; ++i) rt.execute(dims);
    std::vector<double> times;
    for (int i = 0; i < steps; ++i) {
      auto s0 = Clock::now();
      rt.execute(dims);
      times.push_back(std::chrono::duration<double, std::milli>(Clock::now() - s0).count());
    }
    auto logits = rt.get(m.logits).to_f32();
    bool finite = !logits.empty();
    for (float f : logits) finite = finite && std::isfinite(f);
    const double tpot = median(times);
    std::printf(
        "{\"case\": \"llama3_8b_decode\", \"layers\": %lld, \"context\": %lld, \"tpot_ms\": %.4f, \"floor_ms\": %.4f, "
        "\"fraction_of_floor\": %.3f, \"gb_read\": %.3f, \"copy_tb_s\": %.3f, \"compile_s\": %.2f, "
        "\"torch_compile_ms\": %.3f, \"ratio_vs_torch_compile\": %.3f, \"graphs_captured\": %d, "
        "\"kernels_compiled\": %d, \"arena_mb\": %.2f, \"logits_finite\": %s}\n",
        static_cast<long long>(c.layers), static_cast<long long>(c.context), tpot, floor_ms, floor_ms / tpot,
        bytes_read / 1e9, bandwidth / 1e12, compile_s, torch_ms * static_cast<double>(c.layers) / 32.0,
        torch_ms * static_cast<double>(c.layers) / 32.0 / tpot, rt.graphs_captured(), rt.kernels_compiled(),
        static_cast<double>(rt.last_arena_bytes()) / (1 << 20), finite ? "true" : "false");
    std::fflush(stdout);
    return finite ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("{\"case\": \"llama3_8b_decode\", \"error\": \"%s\"}\n", cuda::bench::json_escape(e.what()).c_str());
    std::fprintf(stderr, "decode_cuda: %s\n", e.what());
    return 1;
  }
}
