// Attention as the unrewritten program computes it, one kernel per call (the CudaAttention
// op, rules/cuda_attention.egg): for every row r of every batch b (a kv head; r = g * seq + i
// for query head g of the group and query position i)
//   f[j]   = round_T(q[b, r, :] . k[b, :, j]) * scale[b, g, i, j] + mask[b, g, i, j]
//   e[j]   = exp2((f[j] + max_j f * -1) * log2 e)
//   p[j]   = round_T(e[j] * (1 / sum_j e[j]))
//   out[b, r, :] = round_T(sum_j p[j] * v[b, j, :])
// with every product rounded before it is added (no FMA) and a NaN-propagating max, as the
// primitives do; only the order of the sums differs.
//
// Split-K (flash-decoding's shape) without its rescaling: a decode step has few rows (32 on
// Llama-3-8B), so one block a row would leave most SMs idle. Each row takes a cluster of
// Split blocks (Hopper thread-block clusters; Split 1 elsewhere), each a contiguous share of
// the keys. The blocks exchange their maximum, then their sum, through distributed shared
// memory before any probability is formed, so each p[j] is rounded from the row's own max
// and sum exactly as the primitives round it (flash-decoding's rescaled partials would
// round differently); the first block then adds the Split partial products with v.
// A block of 256 threads: three passes over its keys (the maximum, the sum, then the
// probabilities and their product with v: 16-byte loads of v, 256 / (width / 8) keys at
// once). Up to kAttnRowsCachedKeys keys a block keeps its scores in shared memory (each
// thread its own keys, so no barrier guards them); past that each pass computes them again,
// so that any number of keys fits and nothing is allocated. The search measures it against
// the matmuls and the softmax kernel; its cost keeps it from seeding a prefill's search.
//
// Sizes and strides come from device memory (the runtime's dims buffer), so that a captured
// CUDA graph stays valid as the cache grows; clusters past the last row leave. params (int64):
//   0 batch, 1 rows, 2 group, 3 seq, 4 keys, 5 depth, 6 width,
//   7 q_off, 8 q_bs, 9 q_rs, 10 q_cs,   11 k_off, 12 k_bs, 13 k_ds, 14 k_js,
//   15 v_off, 16 v_bs, 17 v_js, 18 v_ds,
//   19 mask_off, 20 mask_b, 21 mask_g, 22 mask_i, 23 mask_j,
//   24 scale_off, 25 scale_b, 26 scale_g, 27 scale_i, 28 scale_j
// depth and width are at most kAttnRowsMaxDepth (the rule checks it).
namespace lk {

constexpr int kAttnRowsThreads = 256;
constexpr int kAttnRowsMaxDepth = 256;
constexpr int kAttnRowsCachedKeys = 2048;

__device__ __forceinline__ float block_nan_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = nan_max(v, __shfl_xor_sync(0xffffffffu, v, offset));
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < kAttnRowsThreads / 32 ? scratch[lane] : LK_NEG_INF;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = nan_max(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// The cluster's blocks (Split > 1): a barrier over all of them (release and acquire: shared
// memory written before it is visible to every block after it), and a float of another
// block's shared memory (the same variable, in block `rank` of the cluster).
template <int Split>
__device__ __forceinline__ void cluster_barrier() {
  if constexpr (Split > 1) {
    asm volatile("barrier.cluster.arrive.aligned;\n\tbarrier.cluster.wait.aligned;" ::: "memory");
  } else {
    __syncthreads();
  }
}

template <int Split>
__device__ __forceinline__ float cluster_load(const float* local, unsigned rank) {
  if constexpr (Split > 1) {
    const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(local));
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(rank));
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
    return v;
  } else {
    return *local;
  }
}

template <class T>
struct AttentionRow {
  const float* q;  // the row in shared memory, widened
  long long depth, k_ds, k_js, mask_j, scale_j;
  const T* k_base;
  const float *mask_row, *scale_row;
  bool vector_k;  // k contiguous along the depth and 16-byte aligned: 16-byte loads

  // f[j]: the rounded dot product, scaled, plus the mask. The vector path sums each 16-byte
  // chunk on its own before adding it: the chunks' loads and products do not wait on one
  // another (one thread takes a whole key, so all of a key's loads are in flight at once).
  __device__ __forceinline__ float score(long long j) const {
    const T* kj = k_base + j * k_js;
    float acc = 0.0f;
    if (vector_k) {
      constexpr int V = Pack<T>::N;
      const uint4* kv = reinterpret_cast<const uint4*>(kj);
      const long long chunks = depth / V;
#pragma unroll 16
      for (long long c = 0; c < chunks; ++c) {
        float kf[V];
        Pack<T>::unpack(__ldg(kv + c), kf);
        float part = __fmul_rn(q[c * V], kf[0]);
#pragma unroll
        for (int e = 1; e < V; ++e) part = __fadd_rn(part, __fmul_rn(q[c * V + e], kf[e]));
        acc = __fadd_rn(acc, part);
      }
    } else {
      for (long long d = 0; d < depth; ++d) acc = __fadd_rn(acc, __fmul_rn(q[d], to_float(kj[d * k_ds])));
    }
    const float rounded = to_float(from_float<T>(acc));
    return __fadd_rn(__fmul_rn(rounded, scale_row[j * scale_j]), mask_row[j * mask_j]);
  }
};

// sum_j probs[j] * v[j0 + j, :] over n keys, into this thread's share of the row: the vector
// path gives each key width / V threads (a 16-byte load each, V columns), so 256 / (width / V)
// keys are read at once; the scalar path gives each key width threads.
template <class T>
struct AttentionValues {
  const T* v_base;  // v[b, 0, 0]
  long long v_js, v_ds, width;
  bool vector_v;
  int per_key, lanes;  // threads per key, keys at once
  int column, lane;    // this thread's first column and key lane (lane >= lanes: idle)
  float acc[Pack<T>::N];

  __device__ void init(int tid) {
    constexpr int V = Pack<T>::N;
    per_key = vector_v ? (int)(width / V) : (int)width;
    lanes = per_key >= kAttnRowsThreads ? 1 : kAttnRowsThreads / per_key;
    lane = tid / per_key;
    column = (tid % per_key) * (vector_v ? V : 1);
#pragma unroll
    for (int e = 0; e < V; ++e) acc[e] = 0.0f;
  }
  __device__ __forceinline__ void add(const float* probs, long long j0, long long n) {
    if (lane >= lanes) return;
    if (vector_v) {
      constexpr int V = Pack<T>::N;
      const T* base = v_base + column;
#pragma unroll 8
      for (long long j = lane; j < n; j += lanes) {
        float vf[V];
        Pack<T>::unpack(__ldg(reinterpret_cast<const uint4*>(base + (j0 + j) * v_js)), vf);
        const float pj = probs[j];
#pragma unroll
        for (int e = 0; e < V; ++e) acc[e] = __fadd_rn(acc[e], __fmul_rn(pj, vf[e]));
      }
    } else {
      const T* col = v_base + column * v_ds;
#pragma unroll 8
      for (long long j = lane; j < n; j += lanes) acc[0] = __fadd_rn(acc[0], __fmul_rn(probs[j], to_float(col[(j0 + j) * v_js])));
    }
  }
  // Each lane's sums into `partial` ([lanes][width]), then column c's total.
  __device__ void store(float* partial) const {
    if (lane >= lanes) return;
    const int n = vector_v ? Pack<T>::N : 1;
    for (int e = 0; e < n; ++e) partial[lane * width + column + e] = acc[e];
  }
};

template <class T, int Split>
__device__ __forceinline__ void attention_rows(const T* __restrict__ q, const T* __restrict__ k,
                                               const T* __restrict__ v, const float* __restrict__ mask,
                                               const float* __restrict__ scale, T* __restrict__ out,
                                               const long long* __restrict__ p) {
  const long long batch = p[0], rows = p[1], seq = p[3], keys = p[4], depth = p[5], width = p[6];
  // Blocks blockIdx.x / Split * Split .. + Split - 1 are one cluster (1-D clusters are
  // consecutive blocks) and take one row; the whole cluster leaves together.
  const long long block = blockIdx.x / Split;
  const unsigned part = blockIdx.x % Split;
  if (block >= batch * rows) return;
  const long long b = block / rows, r = block % rows, g = r / seq, i = r % seq;
  const long long share = (keys + Split - 1) / Split;
  const long long first = part * share < keys ? part * share : keys;
  const long long last = first + share < keys ? first + share : keys;  // this block's keys: [first, last)
  const long long own = last - first;
  const int tid = threadIdx.x;
  constexpr int V = Pack<T>::N;
  __shared__ float q_row[kAttnRowsMaxDepth];
  __shared__ float scratch[32];
  __shared__ float exchanged[2];  // this block's maximum, then its sum, for the cluster
  __shared__ float probs[kAttnRowsThreads];
  __shared__ float partial[kAttnRowsThreads * V];
  __shared__ float cached[kAttnRowsCachedKeys];
  const bool cache = own <= kAttnRowsCachedKeys;
  for (long long d = tid; d < depth; d += kAttnRowsThreads)
    q_row[d] = to_float(q[p[7] + b * p[8] + r * p[9] + d * p[10]]);
  __syncthreads();

  AttentionRow<T> row;
  row.q = q_row;
  row.depth = depth;
  row.k_ds = p[13];
  row.k_js = p[14];
  row.k_base = k + p[11] + b * p[12];
  row.mask_row = mask + p[19] + b * p[20] + g * p[21] + i * p[22];
  row.mask_j = p[23];
  row.scale_row = scale + p[24] + b * p[25] + g * p[26] + i * p[27];
  row.scale_j = p[28];
  row.vector_k = row.k_ds == 1 && depth % V == 0 && row.k_js % V == 0 &&
                 reinterpret_cast<unsigned long long>(row.k_base) % 16 == 0;

  // The row's maximum, then the sum of its exponentials: each block over its keys, then
  // over the cluster.
  float mx = LK_NEG_INF;
  for (long long j = first + tid; j < last; j += kAttnRowsThreads) {
    const float f = row.score(j);
    if (cache) cached[j - first] = f;
    mx = nan_max(mx, f);
  }
  mx = block_nan_max(mx, scratch);
  if (Split > 1) {
    if (tid == 0) exchanged[0] = mx;
    cluster_barrier<Split>();
    for (unsigned c = 0; c < Split; ++c) mx = nan_max(mx, cluster_load<Split>(&exchanged[0], c));
  }
  const float neg_max = __fmul_rn(mx, -1.0f);
  constexpr float kLog2e = 1.4426950408889634f;
  float sum = 0.0f;
  for (long long j = first + tid; j < last; j += kAttnRowsThreads)
    sum = __fadd_rn(sum, exp2f(__fmul_rn(__fadd_rn(cache ? cached[j - first] : row.score(j), neg_max), kLog2e)));
  sum = block_sum(sum, scratch);
  if (Split > 1) {
    if (tid == 0) exchanged[1] = sum;
    cluster_barrier<Split>();
    sum = 0.0f;
    for (unsigned c = 0; c < Split; ++c) sum = __fadd_rn(sum, cluster_load<Split>(&exchanged[1], c));
  }
  const float inv_sum = __frcp_rn(sum);
  auto probability = [&](float f) {
    return to_float(from_float<T>(__fmul_rn(exp2f(__fmul_rn(__fadd_rn(f, neg_max), kLog2e)), inv_sum)));
  };

  AttentionValues<T> values;
  values.v_base = v + p[15] + b * p[16];
  values.v_js = p[17];
  values.v_ds = p[18];
  values.width = width;
  values.vector_v = values.v_ds == 1 && width % V == 0 && values.v_js % V == 0 &&
                    reinterpret_cast<unsigned long long>(values.v_base) % 16 == 0;
  values.init(tid);
  if (cache) {
    // Every probability in place of its score (each thread its own keys), then one pass.
    for (long long j = tid; j < own; j += kAttnRowsThreads) cached[j] = probability(cached[j]);
    __syncthreads();
    values.add(cached, first, own);
  } else {
    // A chunk of probabilities at a time, then the chunk's product with v.
    for (long long j0 = first; j0 < last; j0 += kAttnRowsThreads) {
      const long long j = j0 + tid;
      const float pj = j < last ? probability(row.score(j)) : 0.0f;
      __syncthreads();  // the chunk before is read
      probs[tid] = pj;
      __syncthreads();
      values.add(probs, j0, last - j0 < kAttnRowsThreads ? last - j0 : kAttnRowsThreads);
    }
  }
  __syncthreads();
  values.store(partial);
  __syncthreads();
  // This block's share of the output, column c in partial[c] (the lanes' sums added).
  for (long long c = tid; c < width; c += kAttnRowsThreads) {
    float o = 0.0f;
    for (int l = 0; l < values.lanes; ++l) o = __fadd_rn(o, partial[l * width + c]);
    partial[c] = o;  // lane 0's entry of column c, read only by this thread
  }
  if (Split > 1) cluster_barrier<Split>();  // every block's share is written
  else __syncthreads();
  if (part == 0)
    for (long long c = tid; c < width; c += kAttnRowsThreads) {
      float o = partial[c];
      for (unsigned s = 1; s < Split; ++s) o = __fadd_rn(o, cluster_load<Split>(&partial[c], s));
      out[(b * rows + r) * width + c] = from_float<T>(o);
    }
  if (Split > 1) cluster_barrier<Split>();  // no block leaves while the first reads its share
}

}  // namespace lk

// Split 1: one block a row, any arch. The cluster entry (sm_90 and later) takes a cluster
// of SPLIT blocks a row; the runtime launches SPLIT times as many blocks.
#define LUMINAL_ATTENTION_ROWS_ENTRY(NAME, T)                                                                    \
  extern "C" __global__ void __launch_bounds__(lk::kAttnRowsThreads)                                             \
      NAME(const T* q, const T* k, const T* v, const float* mask, const float* scale, T* out,                    \
           const long long* params) {                                                                            \
    LK_GRID_ENTER();                                                                                              \
    lk::attention_rows<T, 1>(q, k, v, mask, scale, out, params);                                                 \
  }
#define LUMINAL_ATTENTION_ROWS_CLUSTER_ENTRY(NAME, T, SPLIT)                                                     \
  extern "C" __global__ void __cluster_dims__(SPLIT, 1, 1) __launch_bounds__(lk::kAttnRowsThreads)              \
      NAME(const T* q, const T* k, const T* v, const float* mask, const float* scale, T* out,                    \
           const long long* params) {                                                                            \
    LK_GRID_ENTER();                                                                                              \
    lk::attention_rows<T, SPLIT>(q, k, v, mask, scale, out, params);                                             \
  }
