#include "luminal/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "luminal/error.hpp"

namespace luminal {

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY);
  LUMINAL_CHECK(fd >= 0, "safetensors: cannot open '", path, "': ", std::strerror(errno));
  struct stat st {};
  fstat(fd, &st);
  size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    fail("safetensors: '", path, "' is ", size, " bytes, too short for a header");
  }
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  LUMINAL_CHECK(map != MAP_FAILED, "safetensors: cannot map '", path, "'");
  f.map_ = map;
  f.map_size_ = size;
  auto* bytes = static_cast<const std::byte*>(map);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes, 8);  // little-endian on every platform we target
  LUMINAL_CHECK(header_len <= size - 8, "safetensors: '", path, "' declares a ", header_len,
                "-byte header but the file has only ", size - 8, " bytes after the length");
  f.data_ = bytes + 8 + header_len;
  size_t data_size = size - 8 - header_len;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(reinterpret_cast<const char*>(bytes + 8),
                                   reinterpret_cast<const char*>(bytes + 8 + header_len));
  } catch (const nlohmann::json::exception& e) {
    fail("safetensors: '", path, "' has a malformed JSON header: ", e.what());
  }
  LUMINAL_CHECK(header.is_object(), "safetensors: '", path, "' header is not a JSON object");
  for (auto& item : header.items()) {
    const std::string name = item.key();  // a named copy: lambdas below capture it (clang 14)
    auto& info = item.value();
    if (name == "__metadata__") continue;
    auto bad = [&](const std::string& why) { fail("safetensors: '", path, "' tensor '", name, "': ", why); };
    if (!info.is_object() || !info.contains("dtype") || !info.contains("shape") || !info.contains("data_offsets"))
      bad("entry needs dtype, shape and data_offsets");
    if (!info["dtype"].is_string() || !info["shape"].is_array() || !info["data_offsets"].is_array() ||
        info["data_offsets"].size() != 2)
      bad("malformed dtype, shape or data_offsets");
    Entry e;
    try {
      e.dtype = parse_dtype(info["dtype"].get<std::string>());
    } catch (const Error& err) {
      bad(err.what());
    }
    // Sizes are checked for overflow: a shape of 2^32 x 2^32 over 0 bytes must not wrap
    // to a small product and open as a valid (empty) tensor.
    size_t numel = 1;
    bool overflow = false;
    for (const auto& d : info["shape"]) {
      if (!d.is_number_unsigned()) bad("shape entries must be non-negative integers");
      uint64_t n = d.get<uint64_t>();
      if (n > static_cast<uint64_t>(INT64_MAX)) bad("shape entry " + std::to_string(n) + " is too large");
      e.shape.push_back(static_cast<int64_t>(n));
      overflow = overflow || __builtin_mul_overflow(numel, static_cast<size_t>(n), &numel);
    }
    size_t nbytes = 0;
    overflow = overflow || __builtin_mul_overflow(numel, dtype_bytes(e.dtype), &nbytes);
    if (overflow) bad("shape " + info["shape"].dump() + " has more elements than memory can hold");
    for (const auto& o : info["data_offsets"])
      if (!o.is_number_unsigned()) bad("data_offsets must be non-negative integers");
    e.begin = info["data_offsets"][0].get<size_t>();
    e.end = info["data_offsets"][1].get<size_t>();
    if (e.begin > e.end || e.end > data_size)
      bad("data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + ") outside the " +
          std::to_string(data_size) + "-byte data section");
    if (e.end - e.begin != nbytes)
      bad("holds " + std::to_string(e.end - e.begin) + " bytes but its shape and dtype need " +
          std::to_string(nbytes));
    f.entries_[name] = std::move(e);
  }
  // No two tensors may share bytes (the format lays them out back to back).
  std::vector<std::pair<const std::string*, const Entry*>> by_offset;
  for (const auto& [name, e] : f.entries_) by_offset.emplace_back(&name, &e);
  std::sort(by_offset.begin(), by_offset.end(), [](const auto& a, const auto& b) {
    return a.second->begin != b.second->begin ? a.second->begin < b.second->begin : a.second->end < b.second->end;
  });
  const std::pair<const std::string*, const Entry*>* last = nullptr;  // the previous non-empty tensor
  for (const auto& cur : by_offset) {
    if (cur.second->begin == cur.second->end) continue;  // an empty tensor holds no bytes
    if (last && cur.second->begin < last->second->end)
      fail("safetensors: '", path, "' tensors '", *last->first, "' [", last->second->begin, ", ", last->second->end,
           ") and '", *cur.first, "' [", cur.second->begin, ", ", cur.second->end, ") overlap");
    last = &cur;
  }
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) munmap(map_, map_size_);
}
SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept { *this = std::move(o); }
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& o) noexcept {
  if (this != &o) {
    if (map_) munmap(map_, map_size_);
    path_ = std::move(o.path_);
    entries_ = std::move(o.entries_);
    data_ = o.data_;
    map_ = o.map_;
    map_size_ = o.map_size_;
    o.map_ = nullptr;
    o.data_ = nullptr;
  }
  return *this;
}

const SafetensorsFile::Entry& SafetensorsFile::entry(const std::string& name) const {
  auto it = entries_.find(name);
  LUMINAL_CHECK(it != entries_.end(), "safetensors: tensor '", name, "' not found in '", path_, "'");
  return it->second;
}

std::span<const std::byte> SafetensorsFile::raw(const std::string& name) const {
  const Entry& e = entry(name);
  return {data_ + e.begin, e.end - e.begin};
}

HostTensor SafetensorsFile::read(const std::string& name) const {
  const Entry& e = entry(name);
  HostTensor t;
  t.dtype = e.dtype;
  t.shape = e.shape;
  auto r = raw(name);
  t.bytes.assign(r.begin(), r.end());
  return t;
}

void write_safetensors(const std::string& path, const std::map<std::string, HostTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    std::string dt(dtype_name(t.dtype));
    if (t.dtype == DType::Bool) dt = "BOOL";
    std::vector<int64_t> shape = t.shape.empty() ? std::vector<int64_t>{static_cast<int64_t>(t.numel())} : t.shape;
    header[name] = {{"dtype", dt}, {"shape", shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  while (text.size() % 8) text += ' ';
  std::ofstream out(path, std::ios::binary);
  LUMINAL_CHECK(out.good(), "write_safetensors: cannot write '", path, "'");
  uint64_t len = text.size();
  out.write(reinterpret_cast<const char*>(&len), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& [name, t] : tensors) out.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
}

}  // namespace luminal
