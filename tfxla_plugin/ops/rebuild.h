// Rebuilding a kernel from its source when the shipped .so cannot be used, by running the compiler
// directly: no shell, no interpreter (included by tfxla_launch.cc only, hence the unnamed namespace).
//
// A wrapped SavedModel ships each kernel as `<id>.so` beside its source `<id><source_suffix>` (C for
// the CPU backend, a CUDA host launcher for the CUDA backend), and its TfxlaLaunch nodes record per
// kernel the sha256 of both, the CPU features the .so was built for and the backend's rebuild command
// (`rebuild_commands`: a JSON argv from `Backend.rebuild_command`, whose elements "{source}" and
// "{output}" stand for the source and the object to build). When the .so is missing, its hash is not
// the recorded one, or this CPU lacks a feature it was built for, the op:
//
// 1. reads the source once and checks its sha256 against the recorded one (every time: also when
//    this process rebuilt it already), copies those bytes into a directory it creates for this rebuild
//    (mkdtemp: a new name, mode 0700, owned by this user, checked again after it is made), reads the
//    copy back and checks its sha256 too, so the bytes checked are the bytes compiled and nobody else
//    can change them in between;
// 2. runs the command with posix_spawnp (argv[0] looked up on the PATH, stdin /dev/null, stdout and
//    stderr captured; killed after kRebuildSeconds), in no shell;
// 3. reads the object once and loads exactly those bytes as it loads a shipped kernel (a sealed memfd,
//    KernelTable::Adopt), then deletes the directory. A process rebuilds each (source, command) once.
//
// Every failure names the node, the kernel and, for the compiler, the command, its exit status and the
// tail of what it printed.
#ifndef TFXLA_OPS_REBUILD_H_
#define TFXLA_OPS_REBUILD_H_

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "json_reader.h"
#include "kernel_file.h"
#include "kernel_table.h"
#include "tensorflow/core/platform/errors.h"  // TF_RETURN_IF_ERROR

extern char** environ;

namespace tfxla {
namespace {

constexpr char kSourcePlaceholder[] = "{source}";  // backends/__init__.py SOURCE
constexpr char kOutputPlaceholder[] = "{output}";  // backends/__init__.py OUTPUT
constexpr int kRebuildSeconds = 600;               // as backends/kernel_cache.py's compiler timeout
constexpr size_t kOutputTail = 4000;               // bytes of the compiler's output kept for the error

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

// Parses one `rebuild_commands` entry: a JSON list of strings with exactly one "{source}" and one
// "{output}" element and a non-empty argv[0].
absl::Status ParseRebuildCommand(const std::string& text, std::vector<std::string>* argv) {
  Json json;
  std::string error;
  if (text.find('\0') != std::string::npos || !JsonReader(text.c_str()).Parse(&json, &error) ||
      json.kind != Json::kArray)
    return InvalidArgument("rebuild command is not a JSON list (", error.empty() ? "not a list" : error, "): ", text);
  int sources = 0, outputs = 0;
  for (const Json& e : json.array) {
    if (e.kind != Json::kString) return InvalidArgument("rebuild command has an element that is not a string: ", text);
    sources += e.str == kSourcePlaceholder;
    outputs += e.str == kOutputPlaceholder;
    argv->push_back(e.str);
  }
  if (argv->empty() || argv->front().empty() || sources != 1 || outputs != 1)
    return InvalidArgument("rebuild command needs a program and exactly one \"", kSourcePlaceholder, "\" and one \"",
                           kOutputPlaceholder, "\" element: ", text);
  return absl::OkStatus();
}

// The command as a reader would type it (for errors only: it is never given to a shell).
std::string CommandString(const std::vector<std::string>& argv) {
  std::vector<std::string> quoted;
  for (const std::string& a : argv) {
    const bool plain = !a.empty() && a.find_first_not_of(
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=/.,:@%{}") == std::string::npos;
    quoted.push_back(plain ? a : absl::StrCat("'", a, "'"));
  }
  return absl::StrJoin(quoted, " ");
}

// A new directory only this user can use, for one rebuild: mkdtemp under $TMPDIR (else /tmp).
absl::Status MakePrivateDir(std::string* dir) {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = absl::StrCat(tmp != nullptr && *tmp == '/' ? tmp : "/tmp", "/tfxla_rebuild_XXXXXX");
  if (::mkdtemp(&pattern[0]) == nullptr)
    return FailedPrecondition("cannot create a private directory to rebuild in (", pattern, "): ", std::strerror(errno));
  struct stat st;
  if (::lstat(pattern.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() ||
      (st.st_mode & 077) != 0) {
    ::rmdir(pattern.c_str());
    return FailedPrecondition("the directory ", pattern, " made to rebuild in is not private (mode 0700, this user's)");
  }
  *dir = pattern;
  return absl::OkStatus();
}

// Writes `data` to the new file `path` (0600; an existing file or a link there is an error).
absl::Status WriteNewFile(const std::string& path, const std::string& data) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return Internal("cannot create '", path, "': ", std::strerror(errno));
  for (size_t put = 0; put < data.size();) {
    const ssize_t n = ::write(fd, data.data() + put, data.size() - put);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      ::close(fd);
      return Internal("cannot write '", path, "': ", std::strerror(e));
    }
    put += n;
  }
  return ::close(fd) == 0 ? absl::OkStatus() : Internal("cannot write '", path, "': ", std::strerror(errno));
}

// Removes the rebuild directory and what the compiler left in it (files; it makes no subdirectories).
void RemoveDir(const std::string& dir) {
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const struct dirent* e = ::readdir(d))
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
        ::unlink(absl::StrCat(dir, "/", e->d_name).c_str());
    ::closedir(d);
  }
  ::rmdir(dir.c_str());
}

double Now() {
  struct timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Runs `argv` (no shell) and waits for it; *exit_status is its wait status, *output the tail of its
// stdout and stderr. An error status only when it could not be started (e.g. argv[0] not found).
absl::Status Spawn(const std::vector<std::string>& argv, int* exit_status, std::string* output) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return Internal("pipe2 failed: ", std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);  // Python ignores SIGPIPE; the compiler gets the default
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);  // its own process group: a timeout kills the compiler's children too
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int spawned = ::posix_spawnp(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(pipe_fds[1]);
  if (spawned != 0) {
    ::close(pipe_fds[0]);
    return FailedPrecondition("cannot run '", argv[0], "': ", std::strerror(spawned));
  }
  const double deadline = Now() + kRebuildSeconds;
  bool killed = false;
  char buf[4096];
  for (;;) {
    struct pollfd p = {pipe_fds[0], POLLIN, 0};
    const int left_ms = static_cast<int>((deadline - Now()) * 1000);
    if (left_ms <= 0 && !killed) {
      ::kill(-pid, SIGKILL);
      killed = true;
      output->append(absl::StrCat("\n[killed after ", kRebuildSeconds, " s]\n"));
    }
    // Killed: its output is read for a few seconds more (something that left its group may keep the pipe).
    if (killed && left_ms < -5000) break;
    const int ready = ::poll(&p, 1, killed ? 1000 : left_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) continue;
    const ssize_t n = ready > 0 ? ::read(pipe_fds[0], buf, sizeof(buf)) : 0;
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    output->append(buf, n);
    if (output->size() > 2 * kOutputTail) output->erase(0, output->size() - kOutputTail);
  }
  ::close(pipe_fds[0]);
  while (::waitpid(pid, exit_status, 0) < 0 && errno == EINTR) {
  }
  if (output->size() > kOutputTail) output->erase(0, output->size() - kOutputTail);
  return absl::OkStatus();
}

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("killed by signal ", WTERMSIG(status));
  return absl::StrCat("wait status ", status);
}

// What one rebuild needs: the source beside the kernel, its recorded hash, and the backend's command.
struct RebuildRequest {
  std::string where;  // "TfxlaLaunch node 'n' (cluster 'c'): kernel 'k.so' <why it is unusable>"
  std::string kernel_path;
  std::string why;  // it is unusable
  std::string source;
  std::string source_sha256;
  std::string backend;
  std::vector<std::string> argv;  // with the placeholders
};

absl::Status CheckSourceHash(const RebuildRequest& r, const std::string& text) {
  if (const std::string h = Sha256Hex(text); h != r.source_sha256)
    return DataLoss(r.where, ", and its source '", r.source, "' has sha256 ", h, ", not the recorded ", r.source_sha256,
                    ": refusing to load or rebuild it");
  return absl::OkStatus();
}

// The bytes of the source of `r`, read once, if they have its recorded hash.
absl::Status ReadSource(const RebuildRequest& r, std::string* text) {
  if (absl::Status s = ReadRegularFile(r.source, "tfxla kernel source", text); !s.ok())
    return NotFound(r.where, ", and its source cannot be read: ", s.message());
  return CheckSourceHash(r, *text);
}

// Rebuilds the kernel of `r` from `text`, its source as ReadSource read it (steps 1 and 2 above); the
// object's bytes in *object.
absl::Status Rebuild(const RebuildRequest& r, const std::string& text, std::string* object) {
  std::string dir;
  TF_RETURN_IF_ERROR(MakePrivateDir(&dir));
  const std::string base = r.source.substr(r.source.rfind('/') + 1);
  const std::string out_name = absl::StrCat(base, ".so");
  const std::string copy = absl::StrCat(dir, "/", base), out = absl::StrCat(dir, "/", out_name);
  std::vector<std::string> argv = r.argv;
  for (std::string& a : argv) {
    if (a == kSourcePlaceholder) a = copy;
    else if (a == kOutputPlaceholder) a = out;
  }
  absl::Status s = WriteNewFile(copy, text);
  std::string copied;
  if (s.ok()) s = ReadRegularFile(copy, "copied tfxla kernel source", &copied);
  if (s.ok()) s = CheckSourceHash(r, copied);  // the bytes compiled, which nobody else can change now
  int status = 0;
  std::string output;
  if (s.ok()) {
    s = Spawn(argv, &status, &output);
    if (!s.ok())
      s = FailedPrecondition(r.where, ", and rebuilding it from '", r.source, "' with the ", r.backend,
                             " backend's compiler failed: ", s.message(), " (command: ", CommandString(argv),
                             "); install that compiler, or re-wrap the model on this machine");
  }
  if (s.ok() && status != 0)
    s = FailedPrecondition(r.where, ", and rebuilding it from '", r.source, "' failed with ", DescribeExit(status),
                           ": ", CommandString(argv), "\n", output.empty() ? "(no output)" : output);
  if (s.ok()) {
    s = ReadRegularFile(out, "rebuilt tfxla kernel", object);
    if (!s.ok())
      s = FailedPrecondition(r.where, ", and its rebuild exited 0 but left no object: ", s.message(), " (command: ",
                             CommandString(argv), ")");
  }
  RemoveDir(dir);
  return s;
}

// The kernel rebuilt for `r`: the one this process rebuilt already from the same source and command
// (its source is still read and checked), else rebuilt now (Rebuild) and loaded (KernelTable::Adopt).
// One line on stderr says which (directly: TF's C++ log is often silenced, and this must be seen).
absl::Status RebuiltKernel(const RebuildRequest& r, const LoadedKernel** out) {
  const std::string key = absl::StrCat("rebuilt:", r.source_sha256, "\n", absl::StrJoin(r.argv, "\n"));
  static absl::Mutex rebuild_mu(absl::kConstInit);  // one rebuild at a time, so each key is built once
  absl::MutexLock lock(&rebuild_mu);
  std::string text;
  TF_RETURN_IF_ERROR(ReadSource(r, &text));
  if ((*out = KernelTable::Get().Find(key)) != nullptr) {
    std::fprintf(stderr, "tfxla: kernel '%s' %s; using the kernel this process rebuilt from its source '%s'\n",
                 r.kernel_path.c_str(), r.why.c_str(), r.source.c_str());
    return absl::OkStatus();
  }
  std::string object;
  TF_RETURN_IF_ERROR(Rebuild(r, text, &object));
  std::fprintf(stderr, "tfxla: kernel '%s' %s; rebuilt it from its source '%s' (%s)\n", r.kernel_path.c_str(),
               r.why.c_str(), r.source.c_str(), CommandString(r.argv).c_str());
  return KernelTable::Get().Adopt(key, r.kernel_path, object, out);
}

}  // namespace
}  // namespace tfxla

#endif  // TFXLA_OPS_REBUILD_H_
