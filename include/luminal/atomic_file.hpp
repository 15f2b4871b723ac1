// Writing a cache file so that no reader, in this process or another, ever sees half of it.
#pragma once

#include <filesystem>
#include <string_view>

namespace luminal {

// Writes `bytes` to a name unique to this process, thread and call beside `path`, then
// renames it over `path` (atomic on POSIX). Creates the parent directory. Returns false,
// leaving nothing behind, when any step fails: caches treat that as a miss next time.
bool write_file_atomically(const std::filesystem::path& path, std::string_view bytes);

}  // namespace luminal
