// JSON helpers shared by the CUDA benchmark programs (they print one JSON object per line).
#pragma once
#include <cmath>
#include <cstdio>
#include <string>

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

}  // namespace luminal::cuda::bench
