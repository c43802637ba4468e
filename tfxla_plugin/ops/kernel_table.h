// Loading kernels for the TfxlaLaunch op (included by tfxla_launch.cc and rebuild.h, hence the unnamed
// namespace): a kernel file is read once and checked (sha256, ELF; kernel_file.h), those bytes are
// loaded (a sealed memfd, dlopen + tfxla_init), its signature parsed, and the process-wide
// KernelTable keeps every loaded kernel until exit.
#ifndef TFXLA_OPS_KERNEL_TABLE_H_
#define TFXLA_OPS_KERNEL_TABLE_H_

#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "json_reader.h"
#include "kernel_file.h"
#include "parallel.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"
#include "tensorflow/core/platform/errors.h"  // TF_RETURN_IF_ERROR

namespace tfxla {
namespace {

using ::tensorflow::DataType;
using ::tensorflow::DataTypeString;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::PartialTensorShape;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

constexpr int kAbiVersion = 2;  // backends/codegen/abi.py ABI_VERSION
// A kernel with symbolic dims (backends/codegen/symbolic.py): -1 dims, tfxla_shapes for the outputs and scratch.
constexpr int kSymbolicAbiVersion = 3;
constexpr size_t kErrLen = 1024;
constexpr int64_t kScratchAlign = 64;

// ---------------------------------------------------------------------------------------------
// Loaded kernels.

struct TensorSpec {
  std::string hlo_type;  // "f32", "pred", ...
  DataType dtype;
  std::vector<int64_t> dims;

  std::string ToString() const {
    return absl::StrCat(hlo_type, "[", absl::StrJoin(dims, ",", [](std::string* out, int64_t d) {
                          absl::StrAppend(out, d < 0 ? std::string("?") : absl::StrCat(d));
                        }), "]");
  }
};

using AbiVersionFn = int (*)();
using SignatureFn = const char* (*)();
using ScratchBytesFn = int64_t (*)();
using ShapesFn = int (*)(const int64_t*, int64_t*, int64_t*, char*, size_t);
using InitFn = int (*)(void**, char*, size_t);
using TeardownFn = void (*)(void*);
using RunFn = int (*)(void*, const void* const*, const int64_t*, void* const*, char*, const tfxla_runtime*, char*,
                      size_t);

struct LoadedKernel {
  std::string path;
  std::string sha256;
  std::string module;
  int fd = -1;  // the sealed memfd it was loaded from, open while it is loaded (see SealedCopy)
  void* handle = nullptr;
  RunFn run = nullptr;
  ShapesFn shapes = nullptr;  // ABI 3 (symbolic dims): output dims and scratch bytes for the input dims
  TeardownFn teardown = nullptr;
  void* state = nullptr;  // written once by tfxla_init, read-only afterwards
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  int64_t scratch_bytes = 0;
  int64_t total_input_rank = 0;

  std::string Name() const { return absl::StrCat("'", module, "' (", path, ")"); }
};

// HLO element type names (hlo/dtypes.py) -> TF dtypes with the same storage.
bool DataTypeFromHlo(const std::string& name, DataType* out) {
  static const auto* kTable = new std::unordered_map<std::string, DataType>{
      {"pred", tensorflow::DT_BOOL},  {"s8", tensorflow::DT_INT8},       {"s16", tensorflow::DT_INT16},
      {"s32", tensorflow::DT_INT32},  {"s64", tensorflow::DT_INT64},     {"u8", tensorflow::DT_UINT8},
      {"u16", tensorflow::DT_UINT16}, {"u32", tensorflow::DT_UINT32},    {"u64", tensorflow::DT_UINT64},
      {"f16", tensorflow::DT_HALF},   {"bf16", tensorflow::DT_BFLOAT16}, {"f32", tensorflow::DT_FLOAT},
      {"f64", tensorflow::DT_DOUBLE}, {"c64", tensorflow::DT_COMPLEX64}, {"c128", tensorflow::DT_COMPLEX128},
  };
  auto it = kTable->find(name);
  if (it == kTable->end()) return false;
  *out = it->second;
  return true;
}

absl::Status ParseSpecs(const Json* list, const char* what, const std::string& path, bool symbolic,
                        std::vector<TensorSpec>* out) {
  if (list == nullptr || list->kind != Json::kArray)
    return InvalidArgument("tfxla kernel '", path, "': signature has no '", what, "' list");
  for (size_t k = 0; k < list->array.size(); ++k) {
    const Json& e = list->array[k];
    const Json* dtype = e.Find("dtype");
    const Json* dims = e.Find("dims");
    if (e.kind != Json::kObject || dtype == nullptr || dtype->kind != Json::kString || dims == nullptr ||
        dims->kind != Json::kArray)
      return InvalidArgument("tfxla kernel '", path, "': signature ", what, "[", k,
                             "] needs a string 'dtype' and a 'dims' list");
    TensorSpec spec;
    spec.hlo_type = dtype->str;
    if (!DataTypeFromHlo(spec.hlo_type, &spec.dtype))
      return Unimplemented("tfxla kernel '", path, "': ", what, "[", k, "] has element type ", spec.hlo_type,
                           ", which the TfxlaLaunch op does not support");
    for (const Json& d : dims->array) {
      if (d.kind != Json::kNumber || !d.is_integer || d.integer < (symbolic ? -1 : 0))
        return InvalidArgument("tfxla kernel '", path, "': ", what, "[", k,
                               "] has a dimension that is not a non-negative integer",
                               symbolic ? " or -1 (symbolic)" : "");
      spec.dims.push_back(d.integer);
    }
    // Buffers are exchanged in TF's row-major order; other layouts would need a transpose here.
    if (const Json* m2m = e.Find("minor_to_major"); m2m != nullptr && !m2m->array.empty()) {
      const int64_t rank = static_cast<int64_t>(spec.dims.size());
      bool row_major = static_cast<int64_t>(m2m->array.size()) == rank;
      for (int64_t i = 0; row_major && i < rank; ++i) row_major = m2m->array[i].integer == rank - 1 - i;
      if (!row_major)
        return Unimplemented("tfxla kernel '", path, "': ", what, "[", k,
                             "] has a non-row-major layout; the TfxlaLaunch op exchanges "
                             "row-major buffers only");
    }
    out->push_back(std::move(spec));
  }
  return absl::OkStatus();
}

template <typename Fn>
absl::Status Symbol(void* handle, const char* name, const std::string& path, bool required, Fn* out) {
  dlerror();
  *out = reinterpret_cast<Fn>(dlsym(handle, name));
  if (*out == nullptr && required)
    return InvalidArgument("'", path, "' is not a tfxla kernel: missing symbol ", name);
  return absl::OkStatus();
}

// Everything after dlopen: symbols, ABI version, signature, tfxla_init.
absl::Status InitLoaded(LoadedKernel* k) {
  AbiVersionFn abi_version;
  SignatureFn signature;
  ScratchBytesFn scratch_bytes;
  InitFn init;
  TF_RETURN_IF_ERROR(Symbol(k->handle, "tfxla_abi_version", k->path, true, &abi_version));
  TF_RETURN_IF_ERROR(Symbol(k->handle, "tfxla_signature", k->path, true, &signature));
  TF_RETURN_IF_ERROR(Symbol(k->handle, "tfxla_scratch_bytes", k->path, false, &scratch_bytes));
  TF_RETURN_IF_ERROR(Symbol(k->handle, "tfxla_init", k->path, true, &init));
  TF_RETURN_IF_ERROR(Symbol(k->handle, "tfxla_teardown", k->path, true, &k->teardown));
  TF_RETURN_IF_ERROR(Symbol(k->handle, "tfxla_run", k->path, true, &k->run));
  const int version = abi_version();
  if (version < kAbiVersion)
    return FailedPrecondition("tfxla kernel '", k->path, "' has ABI version ", version, ": it was built by an older ",
                              "tfxla and must be recompiled (this TfxlaLaunch op speaks version ", kAbiVersion,
                              ", which hands kernels TensorFlow's threads); a wrapped SavedModel: wrap it again ",
                              "with this version (tfxla wrap)");
  if (version != kAbiVersion && version != kSymbolicAbiVersion)
    return FailedPrecondition("tfxla kernel '", k->path, "' has ABI version ", version, ", but this TfxlaLaunch op ",
                              "speaks versions ", kAbiVersion, " and ", kSymbolicAbiVersion,
                              ": it was built by a newer tfxla; recompile the kernel ",
                              "with this one or upgrade tfxla-plugin");
  const char* text = signature();
  if (text == nullptr)
    return InvalidArgument("tfxla kernel '", k->path, "': tfxla_signature() returned NULL");
  Json sig;
  std::string error;
  if (!JsonReader(text).Parse(&sig, &error) || sig.kind != Json::kObject)
    return InvalidArgument("tfxla kernel '", k->path, "': cannot parse its signature (",
                           error.empty() ? "not an object" : error, "): ", text);
  if (const Json* v = sig.Find("abi_version"); v == nullptr || v->integer != version)
    return FailedPrecondition("tfxla kernel '", k->path, "': signature abi_version is not ", version);
  const bool symbolic = version == kSymbolicAbiVersion;
  if (symbolic) TF_RETURN_IF_ERROR(Symbol(k->handle, "tfxla_shapes", k->path, true, &k->shapes));
  if (const Json* m = sig.Find("module"); m != nullptr && m->kind == Json::kString) k->module = m->str;
  TF_RETURN_IF_ERROR(ParseSpecs(sig.Find("inputs"), "inputs", k->path, symbolic, &k->inputs));
  TF_RETURN_IF_ERROR(ParseSpecs(sig.Find("outputs"), "outputs", k->path, symbolic, &k->outputs));
  const Json* scratch = sig.Find("scratch_bytes");
  if (scratch == nullptr || scratch->kind != Json::kNumber || scratch->integer < 0)
    return InvalidArgument("tfxla kernel '", k->path, "': signature has no valid scratch_bytes");
  k->scratch_bytes = scratch->integer;
  if (scratch_bytes != nullptr && scratch_bytes() != k->scratch_bytes)
    return InvalidArgument("tfxla kernel '", k->path, "': tfxla_scratch_bytes() is ", scratch_bytes(),
                           " but its signature says ", k->scratch_bytes);
  for (const TensorSpec& s : k->inputs) k->total_input_rank += static_cast<int64_t>(s.dims.size());
  char err[kErrLen] = {0};
  if (init(&k->state, err, sizeof(err)) != 0) {
    err[kErrLen - 1] = '\0';
    return FailedPrecondition("tfxla kernel ", k->Name(), ": tfxla_init failed: ", err);
  }
  return absl::OkStatus();
}

// The process-wide kernel table. Entries live until exit (the op kernels hold raw pointers).
class KernelTable {
 public:
  static KernelTable& Get() {
    static auto* table = new KernelTable;  // never destroyed: no teardown races at exit
    return *table;
  }

  // The loaded kernel for `path`, loading it on first use: the file is read once, its bytes are
  // checked against `expected_sha256` (unless empty) and loaded (Load). With `unusable` non-null,
  // a file that cannot be read or whose sha256 is not the expected one is no error: *out is then
  // null and *unusable says why (the op rebuilds such a kernel, rebuild.h).
  absl::Status Lookup(const std::string& path, const std::string& expected_sha256, const LoadedKernel** out,
                      std::string* unusable = nullptr) {
    *out = nullptr;
    absl::MutexLock lock(&mu_);
    auto it = kernels_.find(path);
    if (it == kernels_.end()) {
      if (path.empty()) return InvalidArgument("TfxlaLaunch: kernel_path is empty");
      std::string data;
      if (absl::Status s = ReadRegularFile(path, "tfxla kernel file", &data); !s.ok()) {
        if (unusable == nullptr) return s;
        *unusable = absl::StrCat("cannot be read (", s.message(), ")");
        return absl::OkStatus();
      }
      const std::string sha = Sha256Hex(data);
      if (unusable != nullptr && !expected_sha256.empty() && sha != expected_sha256) {
        *unusable = absl::StrCat("has sha256 ", sha, ", not the recorded ", expected_sha256);
        return absl::OkStatus();
      }
      TF_RETURN_IF_ERROR(CheckHash(path, sha, expected_sha256));
      std::unique_ptr<LoadedKernel> k;
      TF_RETURN_IF_ERROR(Load(path, data, sha, &k));
      it = kernels_.emplace(path, std::move(k)).first;
    }
    const LoadedKernel* k = it->second.get();
    if (unusable != nullptr && !expected_sha256.empty() && k->sha256 != expected_sha256) {
      *unusable = absl::StrCat("was loaded with sha256 ", k->sha256, ", not the recorded ", expected_sha256);
      return absl::OkStatus();
    }
    TF_RETURN_IF_ERROR(CheckHash(path, k->sha256, expected_sha256));
    *out = k;
    return absl::OkStatus();
  }

  // The kernel loaded under `key` by Adopt, or null.
  const LoadedKernel* Find(const std::string& key) {
    absl::MutexLock lock(&mu_);
    auto it = kernels_.find(key);
    return it == kernels_.end() ? nullptr : it->second.get();
  }

  // Loads `data`, the bytes of a kernel the op rebuilt itself (rebuild.h; `name` names it in errors and
  // in /proc/self/maps), as a shipped one is loaded, and keeps it under `key` (not a path: a rebuilt
  // kernel is found by what it was built from). The first loaded under a key wins.
  absl::Status Adopt(const std::string& key, const std::string& name, const std::string& data,
                     const LoadedKernel** out) {
    absl::MutexLock lock(&mu_);
    auto it = kernels_.find(key);
    if (it == kernels_.end()) {
      std::unique_ptr<LoadedKernel> k;
      TF_RETURN_IF_ERROR(Load(name, data, Sha256Hex(data), &k));
      it = kernels_.emplace(key, std::move(k)).first;
    }
    *out = it->second.get();
    return absl::OkStatus();
  }

 private:
  static absl::Status CheckHash(const std::string& path, const std::string& sha, const std::string& expected) {
    if (expected.empty() || expected == sha) return absl::OkStatus();
    return DataLoss("tfxla kernel file '", path, "' has sha256 ", sha, ", but the graph was built for sha256 ",
                    expected, "; the file changed after compiling, refusing to run it");
  }

  // Loads `data`, the checked bytes of `path`: ELF check, a sealed memfd copy, dlopen of that, init.
  static absl::Status Load(const std::string& path, const std::string& data, const std::string& sha,
                           std::unique_ptr<LoadedKernel>* out) {
    TF_RETURN_IF_ERROR(CheckElf(path, data));
    auto k = std::make_unique<LoadedKernel>();
    k->path = path;
    k->sha256 = sha;
    TF_RETURN_IF_ERROR(SealedCopy(path, data, &k->fd));
    const std::string name = absl::StrCat("/proc/self/fd/", k->fd);
    dlerror();
    k->handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (k->handle == nullptr) {
      const char* why = dlerror();
      ::close(k->fd);  // nothing is loaded under its name
      return InvalidArgument("cannot load tfxla kernel '", path, "': ", why ? why : "dlopen failed");
    }
    absl::Status s = InitLoaded(k.get());
    if (!s.ok()) {
      if (k->state != nullptr && k->teardown != nullptr) k->teardown(k->state);
      dlclose(k->handle);
      // glibc finds a loaded object by the name it was opened with: while one stays loaded (an object
      // dlclose cannot unload), its fd number must not be reused by the next memfd, so keep it open.
      void* still = dlopen(name.c_str(), RTLD_NOW | RTLD_NOLOAD);
      if (still == nullptr) {
        ::close(k->fd);
      } else {
        dlclose(still);
      }
      return s;
    }
    *out = std::move(k);
    return absl::OkStatus();
  }

  absl::Mutex mu_;
  std::unordered_map<std::string, std::unique_ptr<LoadedKernel>> kernels_ ABSL_GUARDED_BY(mu_);
};

std::string ShapeString(const Tensor& t) {
  return absl::StrCat(DataTypeString(t.dtype()), "[", absl::StrJoin(t.shape().dim_sizes(), ","), "]");
}

}  // namespace
}  // namespace tfxla

#endif  // TFXLA_OPS_KERNEL_TABLE_H_
