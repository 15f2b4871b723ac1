// A typed, contiguous tensor in host memory: what users hand to and read from a runtime.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "luminal/dtype.hpp"

namespace luminal {

struct HostTensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // empty when unknown (e.g. set from a flat vector)
  std::vector<std::byte> bytes;

  size_t numel() const { return bytes.size() / dtype_bytes(dtype); }

  // Element access with conversion (any dtype in, any dtype out).
  double get_f64(size_t i) const;
  int64_t get_i64(size_t i) const;
  void set_f64(size_t i, double v);  // rounds/wraps to dtype
  void set_i64(size_t i, int64_t v);

  static HostTensor zeros(DType dtype, size_t numel, std::vector<int64_t> shape = {});
  template <class T>
  static HostTensor from(std::span<const T> values, DType dtype, std::vector<int64_t> shape = {});
  std::vector<float> to_f32() const;
  std::vector<double> to_f64() const;
  void read_f64(size_t begin, size_t end, double* out) const;  // elements [begin, end) as doubles
  std::vector<int32_t> to_i32() const;
  std::vector<int64_t> to_i64() const;
  HostTensor cast(DType to) const;
};

// Bit-exact storage conversions for the 16-bit float formats.
uint16_t f32_to_f16_bits(float f);
float f16_bits_to_f32(uint16_t h);
uint16_t f32_to_bf16_bits(float f);
float bf16_bits_to_f32(uint16_t h);

template <class T>
HostTensor HostTensor::from(std::span<const T> values, DType dtype, std::vector<int64_t> shape) {
  HostTensor t = zeros(dtype, values.size(), std::move(shape));
  for (size_t i = 0; i < values.size(); ++i) {
    if constexpr (std::is_floating_point_v<T>) t.set_f64(i, static_cast<double>(values[i]));
    else t.set_i64(i, static_cast<int64_t>(values[i]));
  }
  return t;
}

}  // namespace luminal
