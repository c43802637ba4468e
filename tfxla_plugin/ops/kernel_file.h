// Reading a file the TfxlaLaunch op trusts (a kernel, its source) and loading
// exactly the bytes it checked (included by kernel_table.h and rebuild.h, hence the unnamed namespace).
//
// * ReadRegularFile reads through one descriptor and refuses, before reading anything, what is not a
//   regular file (a FIFO would block forever, /dev/zero never ends) or is over kMaxFileBytes.
// * CheckElf: a truncated object must never reach dlopen (SIGBUS).
// * SealedCopy puts checked bytes into a memfd sealed against every change; the op dlopens
//   "/proc/self/fd/N" of it. That, not the path nor a descriptor of the file itself (the file can be
//   rewritten in place), is what makes the object loaded the object whose hash was checked.
#ifndef TFXLA_OPS_KERNEL_FILE_H_
#define TFXLA_OPS_KERNEL_FILE_H_

#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "sha256.h"

namespace tfxla {
namespace {

// Status constructors taking StrCat pieces (TF's errors::X variadics are deprecated).
#define TFXLA_STATUS(Name)                           \
  template <typename... Args>                        \
  absl::Status Name(const Args&... args) {           \
    return absl::Name##Error(absl::StrCat(args...)); \
  }
TFXLA_STATUS(InvalidArgument)
TFXLA_STATUS(NotFound)
TFXLA_STATUS(DataLoss)
TFXLA_STATUS(Internal)
TFXLA_STATUS(FailedPrecondition)
TFXLA_STATUS(Unimplemented)
#undef TFXLA_STATUS

// 2 GiB: far above any kernel (a frozen model's weights included), far below a runaway file.
constexpr uint64_t kMaxFileBytes = uint64_t{2} << 30;

// Raises the soft limit on descriptors to the hard one; whether it rose. Each loaded kernel keeps its
// memfd open (see KernelTable::Load), so a process that loads many may run out at a low soft limit.
bool RaiseFdLimit() {
  struct rlimit limit;
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == limit.rlim_max) return false;
  limit.rlim_cur = limit.rlim_max;
  return ::setrlimit(RLIMIT_NOFILE, &limit) == 0;
}

const char* FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// The bytes of the regular file `path` ("<what> '<path>'" in errors). Opened O_NONBLOCK, so a FIFO
// without a writer does not block the open; everything else is refused after fstat of that descriptor.
absl::Status ReadRegularFile(const std::string& path, const char* what, std::string* data,
                             uint64_t max_bytes = kMaxFileBytes) {
  constexpr int kOpenFlags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY;
  int fd = ::open(path.c_str(), kOpenFlags);
  if (fd < 0 && errno == EMFILE && RaiseFdLimit()) fd = ::open(path.c_str(), kOpenFlags);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT) return NotFound(what, " '", path, "' not found: ", std::strerror(e));
    return NotFound("cannot open ", what, " '", path, "': ", std::strerror(e));
  }
  struct stat st;
  absl::Status s;
  if (::fstat(fd, &st) != 0) {
    s = NotFound("cannot stat ", what, " '", path, "': ", std::strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    s = InvalidArgument(what, " '", path, "' is not a regular file (it is ", FileKind(st.st_mode), ")");
  } else if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    s = InvalidArgument(what, " '", path, "' has ", st.st_size, " bytes, more than the limit of ", max_bytes);
  } else {
    try {
      data->resize(st.st_size);
    } catch (const std::bad_alloc&) {
      s = absl::ResourceExhaustedError(absl::StrCat("no memory to read ", what, " '", path, "' (", st.st_size,
                                                    " bytes)"));
    }
    for (size_t got = 0; s.ok() && got < data->size();) {
      const ssize_t n = ::read(fd, &(*data)[got], data->size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) s = DataLoss("error reading ", what, " '", path, "': ", std::strerror(errno));
      else if (n == 0) s = DataLoss(what, " '", path, "' shrank while it was read (", got, " of ", data->size(), " bytes)");
      else got += n;
    }
  }
  ::close(fd);
  if (!s.ok()) data->clear();
  return s;
}

// dlopen maps segments past the end of a truncated file and the process dies of SIGBUS when the
// loader touches them, so check that the ELF header, the program headers and every segment lie
// inside the file first. Other defects (wrong class or machine) are left to dlopen's own errors.
absl::Status CheckElf(const std::string& path, const std::string& data) {
  auto corrupt = [&](auto... why) {
    return InvalidArgument("cannot load tfxla kernel '", path, "': not a valid shared object (", why...,
                           "; the file has ", data.size(), " bytes)");
  };
  if (data.size() < EI_NIDENT || std::memcmp(data.data(), ELFMAG, SELFMAG) != 0)
    return corrupt("no ELF header");
  if (data[EI_CLASS] != ELFCLASS64) return absl::OkStatus();
  if (data.size() < sizeof(Elf64_Ehdr)) return corrupt("truncated ELF header");
  Elf64_Ehdr eh;
  std::memcpy(&eh, data.data(), sizeof(eh));
  const uint64_t size = data.size();
  if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phoff > size ||
      uint64_t(eh.e_phnum) * sizeof(Elf64_Phdr) > size - eh.e_phoff)
    return corrupt("program headers beyond the end of the file");
  for (int i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    std::memcpy(&ph, data.data() + eh.e_phoff + i * sizeof(Elf64_Phdr), sizeof(ph));
    if (ph.p_offset > size || ph.p_filesz > size - ph.p_offset)
      return corrupt("segment ", i, " ends at byte ", ph.p_offset + ph.p_filesz);
  }
  if (eh.e_shnum != 0 && (eh.e_shoff > size || uint64_t(eh.e_shnum) * eh.e_shentsize > size - eh.e_shoff))
    return corrupt("section headers beyond the end of the file");
  return absl::OkStatus();
}

std::string Sha256Hex(const std::string& data) {
  Sha256 sha;
  sha.Update(reinterpret_cast<const unsigned char*>(data.data()), data.size());
  return sha.HexDigest();
}

// A memfd holding `data`, sealed against writes, shrinking, growing and further seals; its
// descriptor in *fd. `path` names it (in errors, and in /proc/self/maps as /memfd:<name>).
absl::Status SealedCopy(const std::string& path, const std::string& data, int* fd) {
  const std::string name = path.substr(path.rfind('/') + 1).substr(0, 200);
  constexpr unsigned kFlags = MFD_CLOEXEC | MFD_ALLOW_SEALING;
  constexpr unsigned kExec = 0x10;  // MFD_EXEC (Linux 6.3): executable even where vm.memfd_noexec is set
  *fd = ::memfd_create(name.c_str(), kFlags | kExec);
  if (*fd < 0 && errno == EINVAL) *fd = ::memfd_create(name.c_str(), kFlags);  // a kernel before 6.3
  if (*fd < 0 && errno == EMFILE && RaiseFdLimit()) *fd = ::memfd_create(name.c_str(), kFlags);
  if (*fd < 0) {
    const int e = errno;
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot load tfxla kernel '", path, "': memfd_create failed: ", std::strerror(e),
        e == EMFILE || e == ENFILE ? " (each loaded kernel keeps one descriptor; raise the limit: ulimit -n)" : ""));
  }
  for (size_t put = 0; put < data.size();) {
    const ssize_t n = ::write(*fd, data.data() + put, data.size() - put);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      ::close(*fd);
      return Internal("cannot load tfxla kernel '", path, "': writing its sealed copy failed: ", std::strerror(e));
    }
    put += n;
  }
  if (::fcntl(*fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    const int e = errno;
    ::close(*fd);
    return Internal("cannot load tfxla kernel '", path, "': sealing its copy failed: ", std::strerror(e));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace tfxla

#endif  // TFXLA_OPS_KERNEL_FILE_H_
