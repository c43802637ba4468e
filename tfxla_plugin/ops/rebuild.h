// Rebuilding a kernel from its C source when the shipped .so cannot be used.
//
// A wrapped SavedModel ships each kernel as `<id>.so` beside its C source `<id>.c`, with the sha256
// of both (and the CPU features the .so was built for) recorded as attrs of the TfxlaLaunch node.
// When the .so is missing, its hash is not the recorded one, or this CPU lacks a feature it was
// built for, the op rebuilds it from the C source (whose hash must match, or nothing is loaded) by
// running `$TFXLA_PYTHON -m tfxla_plugin.rebuild_kernel --sha256 HASH SOURCE`, which compiles the
// source's bytes only if they hash to HASH, into the local kernel cache, and prints the new .so's
// path; the op loads it only if its bytes match the cache's hash record `<so>.sha256` (kernel_file.h).
// `import tfxla_plugin` sets TFXLA_PYTHON.
#ifndef TFXLA_OPS_REBUILD_H_
#define TFXLA_OPS_REBUILD_H_

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace tfxla {

// The CPU feature flags of this machine (the `flags` line of /proc/cpuinfo), read once.
inline const std::set<std::string>& CpuFlags() {
  static const std::set<std::string>* flags = [] {
    auto* out = new std::set<std::string>;
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("flags", 0) != 0) continue;
      std::istringstream words(line.substr(line.find(':') + 1));
      std::string w;
      while (words >> w) out->insert(w);
      break;
    }
    return out;
  }();
  return *flags;
}

// The features in `required` this CPU lacks (empty when /proc/cpuinfo could not be read: then
// nothing is known to be missing and the kernel is tried as it is).
inline std::vector<std::string> MissingCpuFeatures(const std::vector<std::string>& required) {
  std::vector<std::string> missing;
  const auto& have = CpuFlags();
  if (have.empty()) return missing;
  for (const auto& f : required)
    if (!have.count(f)) missing.push_back(f);
  return missing;
}

inline std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs the rebuild helper on `source` (whose sha256 must be `source_sha256`); on success returns true
// with the rebuilt .so's path in `out`, otherwise false with the reason (the helper's output) in `out`.
inline bool RebuildFromSource(const std::string& source, const std::string& source_sha256, std::string* out) {
  const char* python = std::getenv("TFXLA_PYTHON");
  if (python == nullptr || *python == '\0') {
    *out = "TFXLA_PYTHON is not set (import tfxla_plugin sets it to the running interpreter)";
    return false;
  }
  const std::string cmd = ShellQuote(python) + " -m tfxla_plugin.rebuild_kernel --sha256 " + ShellQuote(source_sha256) +
                          " " + ShellQuote(source) + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    *out = "cannot start: " + cmd;
    return false;
  }
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) text.append(buf, n);
  const int status = pclose(pipe);
  if (status != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    *out = cmd + " failed:\n" + text;
    return false;
  }
  // The path is the last non-empty line.
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  const size_t nl = text.rfind('\n');
  *out = nl == std::string::npos ? text : text.substr(nl + 1);
  return !out->empty();
}

}  // namespace tfxla

#endif  // TFXLA_OPS_REBUILD_H_
