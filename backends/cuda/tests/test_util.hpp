// Helpers shared by the CUDA tests: skipping when no GPU is present, host-side half and
// bfloat16 rounding, and random data with negatives.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "luminal/dtype.hpp"
#include "luminal/error.hpp"
#include "luminal_cuda/device.hpp"

namespace luminal::cuda::test_util {

// GPU tests skip only when the machine has no usable GPU, and say why.
#define LUMINAL_REQUIRE_GPU()                                                                  \
  do {                                                                                         \
    if (!::luminal::cuda::available().ok)                                                      \
      GTEST_SKIP() << "skipped: no GPU (" << ::luminal::cuda::available().message << ")";      \
  } while (0)

// Host encodings of the kernel dtypes (round to nearest even), stored as raw bytes.
inline uint16_t float_to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return 0x7fc0;
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_bits_to_float(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// GCC's _Float16 (x86-64, GCC 12+) rounds to nearest even, as the device does.
inline uint16_t float_to_f16_bits(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}
inline float f16_bits_to_float(uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, 2);
  return static_cast<float>(h);
}

// A tensor of a kernel dtype on the host: raw bytes plus the exact float values they hold
// (the reference computes from the rounded values, in double).
struct HostData {
  DType dtype;
  std::vector<uint8_t> bytes;
  std::vector<double> values;
};
inline HostData encode(DType dtype, const std::vector<float>& values) {
  HostData d{dtype, std::vector<uint8_t>(values.size() * dtype_bytes(dtype)), {}};
  d.values.reserve(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::F32) {
      std::memcpy(d.bytes.data() + 4 * i, &values[i], 4);
      d.values.push_back(values[i]);
    } else {
      const uint16_t bits = dtype == DType::BF16 ? float_to_bf16_bits(values[i]) : float_to_f16_bits(values[i]);
      std::memcpy(d.bytes.data() + 2 * i, &bits, 2);
      d.values.push_back(dtype == DType::BF16 ? bf16_bits_to_float(bits) : f16_bits_to_float(bits));
    }
  }
  return d;
}
inline std::vector<double> decode(DType dtype, const std::vector<uint8_t>& bytes) {
  const size_t n = bytes.size() / dtype_bytes(dtype);
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (dtype == DType::F32) {
      float f;
      std::memcpy(&f, bytes.data() + 4 * i, 4);
      out[i] = f;
    } else {
      uint16_t bits;
      std::memcpy(&bits, bytes.data() + 2 * i, 2);
      out[i] = dtype == DType::BF16 ? bf16_bits_to_float(bits) : f16_bits_to_float(bits);
    }
  }
  return out;
}
inline std::vector<float> random_values(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}
inline DeviceBuffer to_device(const HostData& d, StreamHandle stream) {
  DeviceBuffer buf(d.bytes.size());
  buf.upload(d.bytes.data(), d.bytes.size(), stream);
  return buf;
}
inline std::vector<double> from_device(const DeviceBuffer& buf, DType dtype, StreamHandle stream) {
  std::vector<uint8_t> bytes(buf.bytes());
  buf.download(bytes.data(), bytes.size(), stream);
  return decode(dtype, bytes);
}
// Relative tolerance of one rounding to `dtype`, with headroom for fp32 accumulation order.
inline double tolerance(DType dtype) {
  switch (dtype) {
    case DType::BF16: return 1.6e-2;
    case DType::F16: return 2e-3;
    default: return 1e-4;
  }
}

}  // namespace luminal::cuda::test_util
