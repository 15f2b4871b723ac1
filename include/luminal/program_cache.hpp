// The compiled-program cache: what the search chose for a segment, kept on disk so that
// compiling the same model again skips saturation, search and verification (a warm
// compile loads programs and kernels only). docs/SEARCH.md, "Program cache".
//
// A program is stored in an exact binary form (expressions node by node, constants bit
// for bit), under a key that hashes everything the choice depends on: the segment
// itself, the dims it was searched at, the runtime's identity, the rule files' text, the
// search options and the build of the library. A file that is unreadable, truncated or
// written by another format is ignored, never trusted.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "luminal/graph.hpp"
#include "luminal/search/segments.hpp"

namespace luminal {

// 128-bit FNV-style hash as 32 hex digits (stable across processes and machines).
std::string content_hash(std::string_view bytes);

// Exact binary form of a graph; nullopt when it holds a CustomOp (its code is not data).
std::optional<std::string> serialize_graph(const Graph& g);
// Inverse of serialize_graph; malformed bytes are a luminal::Error. Nodes are re-added
// through Graph::add_node, so the usual validation applies.
Graph parse_graph(std::string_view bytes);

class ProgramCache {
 public:
  // $LUMINAL_CACHE_DIR/programs, else ~/.cache/luminal/programs.
  static std::filesystem::path default_dir();
  explicit ProgramCache(std::filesystem::path dir = default_dir());

  const std::filesystem::path& dir() const { return dir_; }
  // nullopt on a miss or an unreadable entry.
  std::optional<search::SegmentProgram> load(const std::string& key) const;
  // Best effort: a full disk or a read-only cache only costs the next compile its speed.
  void store(const std::string& key, const search::SegmentProgram& program) const;

 private:
  std::filesystem::path dir_;
};

// Identifies the library build that runs this code (its file, size and modification
// time), so a rebuilt backend never reuses programs an older build chose.
const std::string& build_identity();

}  // namespace luminal
