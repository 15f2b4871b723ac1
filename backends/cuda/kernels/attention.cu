// Decode attention over a KV cache (flash-decoding): one new query token per sequence,
// grouped-query heads. Pass 1 splits each sequence into chunks; a block takes one
// (kv head, chunk, batch) and serves all GROUP query heads of that kv head, so K and V are
// read once. Its warps walk positions, keeping per head an online-softmax state (max,
// sum, accumulator) in registers, merge through shared memory and write fp32 partials.
// Pass 2 merges the chunks of each (batch, query head) and writes the output.
//   q   [batch, kv_heads * GROUP, HEAD_DIM]            out likewise
//   k,v cache element (b, h, p, d) at b*stride_b + h*stride_h + p*stride_p + d
// The sequence length comes from `seq_len`, or from device memory when `seq_len_ptr` is
// set (so a captured CUDA graph stays valid as the cache grows).
namespace lk {

constexpr int kAttnWarps = 4;

template <class T, int HEAD_DIM, int GROUP>
__device__ __forceinline__ void decode_attention_partial(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, float* __restrict__ partial_o,
    float* __restrict__ partial_stats, int kv_heads, int seq_len, const int* seq_len_ptr, int chunk, long long stride_b,
    long long stride_h, long long stride_p, float scale) {
  constexpr int PER_LANE = HEAD_DIM / 32;
  const int kvh = blockIdx.x, split = blockIdx.y, b = blockIdx.z, splits = gridDim.y;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int len = seq_len_ptr ? *seq_len_ptr : seq_len;
  const int begin = split * chunk, end = min(len, begin + chunk);
  const int q_heads = kv_heads * GROUP;

  float qv[GROUP][PER_LANE];
#pragma unroll
  for (int g = 0; g < GROUP; ++g)
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i)
      qv[g][i] = to_float(q[((long long)b * q_heads + kvh * GROUP + g) * HEAD_DIM + lane * PER_LANE + i]) * scale;

  float m[GROUP], l[GROUP], acc[GROUP][PER_LANE];
#pragma unroll
  for (int g = 0; g < GROUP; ++g) {
    m[g] = LK_NEG_INF;
    l[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) acc[g][i] = 0.0f;
  }
  const T* kb = k + b * stride_b + kvh * stride_h;
  const T* vb = v + b * stride_b + kvh * stride_h;
  for (int p = begin + warp; p < end; p += kAttnWarps) {
    float kf[PER_LANE], vf[PER_LANE];
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) {
      kf[i] = to_float(kb[p * stride_p + lane * PER_LANE + i]);
      vf[i] = to_float(vb[p * stride_p + lane * PER_LANE + i]);
    }
#pragma unroll
    for (int g = 0; g < GROUP; ++g) {
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < PER_LANE; ++i) dot = fmaf(qv[g][i], kf[i], dot);
      const float s = warp_sum(dot);
      const float m_new = fmaxf(m[g], s);
      const float correction = expf(m[g] - m_new);  // 0 on the first position (m = -inf)
      const float weight = expf(s - m_new);
      l[g] = l[g] * correction + weight;
#pragma unroll
      for (int i = 0; i < PER_LANE; ++i) acc[g][i] = fmaf(weight, vf[i], acc[g][i] * correction);
      m[g] = m_new;
    }
  }

  // Merge the warps: each writes its state, then warp 0 combines them in order.
  __shared__ float s_m[kAttnWarps][GROUP], s_l[kAttnWarps][GROUP];
  __shared__ float s_acc[kAttnWarps][GROUP][HEAD_DIM];
#pragma unroll
  for (int g = 0; g < GROUP; ++g) {
    if (lane == 0) s_m[warp][g] = m[g], s_l[warp][g] = l[g];
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) s_acc[warp][g][lane * PER_LANE + i] = acc[g][i];
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < GROUP * HEAD_DIM; idx += blockDim.x) {
    const int g = idx / HEAD_DIM, d = idx % HEAD_DIM;
    float mm = LK_NEG_INF;
    for (int w = 0; w < kAttnWarps; ++w) mm = fmaxf(mm, s_m[w][g]);
    float ll = 0.0f, o = 0.0f;
    if (mm != LK_NEG_INF) {
      for (int w = 0; w < kAttnWarps; ++w) {
        const float f = expf(s_m[w][g] - mm);
        ll += s_l[w][g] * f;
        o += s_acc[w][g][d] * f;
      }
    }
    const long long head = (long long)b * q_heads + kvh * GROUP + g;
    partial_o[(head * splits + split) * HEAD_DIM + d] = o;
    if (d == 0) {
      partial_stats[(head * splits + split) * 2] = mm;
      partial_stats[(head * splits + split) * 2 + 1] = ll;
    }
  }
}

// One block per (query head, batch), HEAD_DIM threads: merge the chunks.
template <class T, int HEAD_DIM>
__device__ __forceinline__ void decode_attention_combine(const float* __restrict__ partial_o,
                                                         const float* __restrict__ partial_stats, T* __restrict__ out,
                                                         int q_heads, int splits) {
  const long long head = (long long)blockIdx.y * q_heads + blockIdx.x;
  const int d = threadIdx.x;
  float mm = LK_NEG_INF;
  for (int s = 0; s < splits; ++s) mm = fmaxf(mm, partial_stats[(head * splits + s) * 2]);
  float ll = 0.0f, o = 0.0f;
  if (mm != LK_NEG_INF) {
    for (int s = 0; s < splits; ++s) {
      const float f = expf(partial_stats[(head * splits + s) * 2] - mm);
      ll += partial_stats[(head * splits + s) * 2 + 1] * f;
      o += partial_o[(head * splits + s) * HEAD_DIM + d] * f;
    }
  }
  out[head * HEAD_DIM + d] = from_float<T>(ll > 0.0f ? o / ll : 0.0f);  // an empty cache attends to nothing
}

}  // namespace lk

#define LUMINAL_ATTENTION_ENTRY(PARTIAL, COMBINE, T, HEAD_DIM, GROUP)                                           \
  extern "C" __global__ void __launch_bounds__(lk::kAttnWarps * 32)                                              \
      PARTIAL(const T* q, const T* k, const T* v, float* partial_o, float* partial_stats, int kv_heads,         \
              int seq_len, const int* seq_len_ptr, int chunk, long long stride_b, long long stride_h,            \
              long long stride_p, float scale) {                                                                 \
    LK_GRID_ENTER();                                                                                              \
    lk::decode_attention_partial<T, HEAD_DIM, GROUP>(q, k, v, partial_o, partial_stats, kv_heads, seq_len,       \
                                                     seq_len_ptr, chunk, stride_b, stride_h, stride_p, scale);   \
  }                                                                                                              \
  extern "C" __global__ void COMBINE(const float* partial_o, const float* partial_stats, T* out, int q_heads,     \
                                     int splits) {                                                               \
    LK_GRID_ENTER();                                                                                              \
    lk::decode_attention_combine<T, HEAD_DIM>(partial_o, partial_stats, out, q_heads, splits);                   \
  }
