// Helpers shared by the CUDA benchmark programs (they print one JSON object per line):
// JSON output, `--name value` arguments, medians.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace luminal::cuda::bench {

// A string's characters as a JSON string's body: quotes and backslashes escaped, line
// breaks and tabs as spaces (an error message from NVRTC spans lines).
inline std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += (c == '\n' || c == '\r' || c == '\t') ? ' ' : c;
  }
  return out;
}

// A JSON number, or null where a value is missing (inf or NaN: a profile that timed out).
inline std::string json_number(double v, const char* format = "%.3f") {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// The number after `name` on the command line, or `fallback`.
inline double arg(int argc, char** argv, const char* name, double fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atof(argv[i + 1]);
  return fallback;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace luminal::cuda::bench
