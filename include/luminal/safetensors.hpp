// Reading safetensors files (memory-mapped). Malformed files raise luminal::Error
// naming the file and the problem; nothing here trusts the header.
#pragma once

#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "luminal/host_tensor.hpp"

namespace luminal {

class SafetensorsFile {
 public:
  struct Entry {
    DType dtype;
    std::vector<int64_t> shape;
    size_t begin = 0, end = 0;  // byte range within the data section
  };

  static SafetensorsFile open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;

  const std::string& path() const { return path_; }
  const std::map<std::string, Entry>& entries() const { return entries_; }
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  const Entry& entry(const std::string& name) const;   // throws naming the tensor
  std::span<const std::byte> raw(const std::string& name) const;
  HostTensor read(const std::string& name) const;      // a copy in the file's dtype

 private:
  SafetensorsFile() = default;
  std::string path_;
  std::map<std::string, Entry> entries_;
  const std::byte* data_ = nullptr;  // start of the data section
  void* map_ = nullptr;
  size_t map_size_ = 0;
};

// Write tensors to a safetensors file (used by tests and tools).
void write_safetensors(const std::string& path, const std::map<std::string, HostTensor>& tensors);

}  // namespace luminal
