// The TfxlaLaunch custom op: runs one compiled tfxla kernel (.so) inside a TensorFlow graph.
//
//   TfxlaLaunch(kernel_path: string, args: Tin) -> results: Tout
//
// The kernel is a plain C shared object with the ABI of backends/codegen/abi.py (ABI version 2):
//   int         tfxla_abi_version(void);      // 2; a kernel of an older ABI is refused: recompile it
//   const char* tfxla_signature(void);       // JSON: abi_version, module, inputs/outputs [{dtype, dims,
//                                             //       minor_to_major}], scratch_bytes
//   int64_t     tfxla_scratch_bytes(void);    // optional; must agree with the signature
//   int         tfxla_init(void** state, char* err, size_t errlen);
//   void        tfxla_teardown(void* state);
//   int         tfxla_run(void* state, const void* const* in, const int64_t* in_dims,
//                         void* const* out, char* scratch, const tfxla_runtime* rt,
//                         char* err, size_t errlen);
//
// Invariants:
// * A kernel path is loaded once per process (dlopen RTLD_NOW|RTLD_LOCAL, signature parsed,
//   tfxla_init called once) and kept until exit; a failed load is not cached, so fixing the file
//   and calling again works. A file whose sha256 differs from a non-empty `kernel_hash` is never
//   dlopen'ed, and the bytes dlopen'ed are the bytes hashed: the file is read once through one
//   descriptor (regular files only, bounded size) and a sealed in-memory copy is loaded.
// * The kernel is never called on inputs it was not compiled for: the input count, every dtype
//   (Tin against the signature) and every input's dims are checked first, each mismatch an
//   InvalidArgument naming the input, the expected and the actual shape.
// * The per-executable state is written only by tfxla_init; every call gets its own scratch arena
//   (allocate_temp, 64-byte aligned), so concurrent calls of one kernel are safe.
// * Every failure is a TF error status naming the kernel file; nothing here aborts the process. A kernel
//   status of 3 (kStatusInvalidArgument: the data is invalid, e.g. a gather index out of range) is an
//   InvalidArgument starting with the kernel's message (TF's own text); any other nonzero one Internal.
// * Threads: the kernel's parallel loops run on oneTBB's process-wide pool (the one oneDNN's TBB build
//   runs on), not on threads of its own: `rt` (parallel.h) is built per Compute, with num_threads =
//   min(TBB's concurrency, TF's intra-op count for the device); every launch (static or tile by tile)
//   gets it. Many TF threads may run kernels at once; they share the one pool.
// * An argument may be a variable's resource handle (Tin entry DT_RESOURCE) instead of its value:
//   the op reads the variable as ReadVariableOp does (shared lock; a copy in copy-on-read mode)
//   and checks its dtype and shape like any input. The eager single-launch path passes handles,
//   so a call is one op however many variables the cluster reads.
// Reading and checking kernel files lives in kernel_file.h, loading them in kernel_table.h,
// rebuilding them (the compiler run directly: no shell, no interpreter) in rebuild.h, the threads
// in parallel.h, planning batch tiles in tiles.h.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "kernel_table.h"
#include "op_def.h"
#include "parallel.h"
#include "rebuild.h"
#include "tiles.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"
#include "tensorflow/core/platform/errors.h"  // TF_RETURN_IF_ERROR

namespace tfxla {
namespace {

// ---------------------------------------------------------------------------------------------
// The op.

// Checks `t` against the kernel's compiled `spec`; a batched input may have any leading dim.
absl::Status CheckInput(const std::string& cluster, int i, const Tensor& t, const TensorSpec& spec, bool batched,
                        const LoadedKernel& k) {
  bool ok = t.dims() == static_cast<int>(spec.dims.size()) && (!batched || t.dims() >= 1);
  // a -1 (symbolic) dim: the kernel checks it (tfxla_shapes)
  for (int d = batched ? 1 : 0; ok && d < t.dims(); ++d) ok = spec.dims[d] < 0 || t.dim_size(d) == spec.dims[d];
  if (ok) return absl::OkStatus();
  std::string expected = spec.ToString();
  if (batched && !spec.dims.empty())
    expected = absl::StrCat(spec.hlo_type, "[?", spec.dims.size() > 1 ? "," : "",
                            absl::StrJoin(std::vector<int64_t>(spec.dims.begin() + 1, spec.dims.end()), ","), "]");
  return InvalidArgument("TfxlaLaunch cluster '", cluster, "': input ", i, " has shape ", ShapeString(t),
                         ", but kernel ", k.Name(), " was compiled for ", expected, " (rank ", spec.dims.size(),
                         ")");
}

class TfxlaLaunchOp : public OpKernel {
 public:
  explicit TfxlaLaunchOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("Tin", &tin_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("Tout", &tout_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("output_shapes", &output_shapes_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("cluster", &cluster_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("kernel_hash", &kernel_hash_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("batch_tiles", &batch_tiles_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("batched_args", &batched_args_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("batched_results", &batched_results_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("kernel_hashes", &kernel_hashes_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("source_hashes", &source_hashes_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("cpu_features", &cpu_features_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("rebuild_commands", &rebuild_commands_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("backend", &backend_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("source_suffix", &source_suffix_));
    const std::string where = absl::StrCat("TfxlaLaunch cluster '", cluster_, "': ");
    OP_REQUIRES(ctx, output_shapes_.size() == tout_.size(),
                InvalidArgument(where, tout_.size(), " output types but ", output_shapes_.size(), " output shapes"));
    n_kernels_ = batch_tiles_.empty() ? 1 : static_cast<int>(batch_tiles_.size());
    for (int64_t t : batch_tiles_) OP_REQUIRES(ctx, t >= 1, InvalidArgument(where, "batch tile ", t, " < 1"));
    if (!batch_tiles_.empty()) {
      OP_REQUIRES(ctx, batched_args_.size() == tin_.size() && batched_results_.size() == tout_.size(),
                  InvalidArgument(where, "batched_args/batched_results must have one entry per input/output"));
      bool any = false;
      for (int64_t b : batched_args_) any = any || b != 0;
      OP_REQUIRES(ctx, any, InvalidArgument(where, "a tiled launch needs at least one batched input"));
    }
    for (const auto* list : {&kernel_hashes_, &source_hashes_, &rebuild_commands_})
      OP_REQUIRES(ctx, list->empty() || static_cast<int>(list->size()) == n_kernels_,
                  InvalidArgument(where, "kernel_hashes/source_hashes/rebuild_commands need one entry per kernel (",
                                  n_kernels_, ")"));
    OP_REQUIRES(ctx, rebuild_commands_.empty() || (!source_hashes_.empty() && !source_suffix_.empty()),
                InvalidArgument(where, "rebuild_commands need source_hashes and a source_suffix"));
    for (const std::string& command : rebuild_commands_) {
      rebuild_argvs_.emplace_back();
      const absl::Status s = ParseRebuildCommand(command, &rebuild_argvs_.back());
      OP_REQUIRES(ctx, s.ok(), InvalidArgument(where, s.message()));
    }
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& path_t = ctx->input(0);
    const bool scalar = tensorflow::TensorShapeUtils::IsScalar(path_t.shape());
    OP_REQUIRES(ctx,
                batch_tiles_.empty() ? scalar
                                     : tensorflow::TensorShapeUtils::IsVector(path_t.shape()) &&
                                           path_t.NumElements() == n_kernels_,
                InvalidArgument("TfxlaLaunch cluster '", cluster_, "': kernel_path must be ",
                                batch_tiles_.empty() ? "a scalar string"
                                                     : absl::StrCat("a vector of ", n_kernels_, " strings (one per batch tile)"),
                                ", got shape ", path_t.shape().DebugString()));
    std::vector<std::string> paths;
    for (int64_t i = 0; i < path_t.NumElements(); ++i) {
      const tensorflow::tstring& p = path_t.flat<tensorflow::tstring>()(i);
      paths.emplace_back(p.data(), p.size());
    }
    std::vector<const LoadedKernel*> ks;
    OP_REQUIRES_OK(ctx, Resolve(paths, &ks));
    std::vector<Tensor> args(tin_.size());
    for (size_t i = 0; i < tin_.size(); ++i) OP_REQUIRES_OK(ctx, Arg(ctx, static_cast<int>(i), *ks[0], &args[i]));
    const PoolRuntime pool(ctx);  // TF's intra-op threads, for the kernel's parallel loops
    if (batch_tiles_.empty()) {
      RunStatic(ctx, pool.get(), *ks[0], args);
    } else {
      RunTiled(ctx, pool.get(), ks, args);
    }
  }

 private:
  // Argument i: the input tensor, or the value of the variable whose handle it is.
  absl::Status Arg(OpKernelContext* ctx, int i, const LoadedKernel& k, Tensor* out) const {
    if (tin_[i] != tensorflow::DT_RESOURCE) {
      *out = ctx->input(1 + i);
      return absl::OkStatus();
    }
    tensorflow::core::RefCountPtr<tensorflow::Var> var;
    if (absl::Status s = tensorflow::LookupResource(ctx, tensorflow::HandleFromInput(ctx, 1 + i), &var); !s.ok())
      return tensorflow::errors::FailedPrecondition("TfxlaLaunch cluster '", cluster_, "': input ", i,
                                                    " is a variable that cannot be read: ", s.message());
    tensorflow::tf_shared_lock lock(*var->mu());
    const Tensor* t = var->tensor();
    if (!var->is_initialized || t == nullptr)
      return tensorflow::errors::FailedPrecondition("TfxlaLaunch cluster '", cluster_, "': input ", i,
                                                    " is an uninitialized variable");
    if (t->dtype() != k.inputs[i].dtype)
      return InvalidArgument("TfxlaLaunch cluster '", cluster_, "': input ", i, " is a variable of dtype ",
                             DataTypeString(t->dtype()), ", but kernel ", k.Name(), " was compiled for ",
                             k.inputs[i].ToString());
    if (!var->copy_on_read_mode.load()) {
      *out = *t;  // shares the buffer, as ReadVariableOp's output does; an assign then writes a new one
      return absl::OkStatus();
    }
    if (!tensorflow::DataTypeCanUseMemcpy(t->dtype()))
      return InvalidArgument("TfxlaLaunch cluster '", cluster_, "': input ", i, " is a variable of dtype ",
                             DataTypeString(t->dtype()), " in copy-on-read mode, which cannot be copied here");
    TF_RETURN_IF_ERROR(ctx->allocate_temp(t->dtype(), t->shape(), out));
    if (t->TotalBytes() > 0) std::memcpy(out->data(), t->data(), t->TotalBytes());
    return absl::OkStatus();
  }

  void RunStatic(OpKernelContext* ctx, const tfxla_runtime* rt, const LoadedKernel& k,
                 const std::vector<Tensor>& args) {
    const int n_in = static_cast<int>(k.inputs.size());
    absl::InlinedVector<const void*, 8> in_ptrs(std::max(n_in, 1), nullptr);
    absl::InlinedVector<int64_t, 32> in_dims;
    in_dims.reserve(std::max<int64_t>(k.total_input_rank, 1));
    for (int i = 0; i < n_in; ++i) {
      const Tensor& t = args[i];
      OP_REQUIRES_OK(ctx, CheckInput(cluster_, i, t, k.inputs[i], false, k));
      in_ptrs[i] = t.data();
      for (int d = 0; d < t.dims(); ++d) in_dims.push_back(t.dim_size(d));
    }
    if (in_dims.empty()) in_dims.push_back(0);
    const int n_out = static_cast<int>(k.outputs.size());
    int64_t scratch_bytes = k.scratch_bytes;
    std::vector<std::vector<int64_t>> out_dims;
    for (const TensorSpec& o : k.outputs) out_dims.push_back(o.dims);
    if (k.shapes != nullptr) OP_REQUIRES_OK(ctx, Shapes(k, in_dims.data(), &out_dims, &scratch_bytes));
    absl::InlinedVector<void*, 8> out_ptrs(std::max(n_out, 1), nullptr);
    for (int j = 0; j < n_out; ++j) {
      TensorShape shape;
      OP_REQUIRES_OK(ctx, TensorShape::BuildTensorShape(out_dims[j], &shape));
      Tensor* out = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(j, shape, &out));
      out_ptrs[j] = out->data();
    }
    Tensor scratch_t;
    char* scratch = nullptr;
    OP_REQUIRES_OK(ctx, Scratch(ctx, scratch_bytes, &scratch_t, &scratch));
    OP_REQUIRES_OK(ctx, Run(k, in_ptrs.data(), in_dims.data(), out_ptrs.data(), scratch, rt));
  }

  // A symbolic kernel's output dims and scratch bytes for these input dims (it checks them first).
  absl::Status Shapes(const LoadedKernel& k, const int64_t* in_dims, std::vector<std::vector<int64_t>>* out_dims,
                      int64_t* scratch_bytes) const {
    std::vector<int64_t> flat(std::max<size_t>(1, [&] {
      size_t n = 0;
      for (const auto& d : *out_dims) n += d.size();
      return n;
    }()));
    char err[kErrLen];
    err[0] = '\0';
    const int status = k.shapes(in_dims, flat.data(), scratch_bytes, err, sizeof(err));
    err[kErrLen - 1] = '\0';
    if (status != 0) return Failed(k, status, err);
    size_t pos = 0;
    for (auto& dims : *out_dims)
      for (int64_t& d : dims) d = flat[pos++];
    return absl::OkStatus();
  }

  void RunTiled(OpKernelContext* ctx, const tfxla_runtime* rt, const std::vector<const LoadedKernel*>& ks,
                const std::vector<Tensor>& args) {
    const LoadedKernel& k0 = *ks[0];
    const int n_in = static_cast<int>(k0.inputs.size());
    const int n_out = static_cast<int>(k0.outputs.size());
    int64_t n = -1;
    for (int i = 0; i < n_in; ++i) {
      const Tensor& t = args[i];
      const bool batched = batched_args_[i] != 0;
      OP_REQUIRES_OK(ctx, CheckInput(cluster_, i, t, k0.inputs[i], batched, k0));
      if (!batched) continue;
      OP_REQUIRES(ctx, n < 0 || t.dim_size(0) == n,
                  InvalidArgument("TfxlaLaunch cluster '", cluster_, "': batched inputs disagree on the batch size (",
                                  n, " vs input ", i, " with ", t.dim_size(0), ")"));
      n = t.dim_size(0);
    }
    std::vector<Tensor*> outs(n_out, nullptr);
    bool need_one = false;
    for (int j = 0; j < n_out; ++j) {
      std::vector<int64_t> dims = k0.outputs[j].dims;
      if (batched_results_[j]) dims[0] = n;
      need_one = need_one || !batched_results_[j];
      TensorShape shape;
      OP_REQUIRES_OK(ctx, TensorShape::BuildTensorShape(dims, &shape));
      OP_REQUIRES_OK(ctx, ctx->allocate_output(j, shape, &outs[j]));
    }
    const std::vector<TileStep> plan = PlanTiles(batch_tiles_, n, need_one);
    int64_t scratch_bytes = 0;
    for (const TileStep& s : plan) scratch_bytes = std::max(scratch_bytes, ks[s.tile]->scratch_bytes);
    Tensor scratch_t;
    char* scratch = nullptr;
    OP_REQUIRES_OK(ctx, Scratch(ctx, scratch_bytes, &scratch_t, &scratch));

    absl::InlinedVector<const void*, 8> in_ptrs(std::max(n_in, 1), nullptr);
    absl::InlinedVector<void*, 8> out_ptrs(std::max(n_out, 1), nullptr);
    std::vector<Tensor> staging_in(n_in), staging_out(n_out);
    for (size_t step = 0; step < plan.size(); ++step) {
      const TileStep& s = plan[step];
      const LoadedKernel& k = *ks[s.tile];
      const int64_t tile = batch_tiles_[s.tile];
      const bool padded = s.rows < tile;
      absl::InlinedVector<int64_t, 32> in_dims;
      for (int i = 0; i < n_in; ++i) {
        const Tensor& t = args[i];
        in_dims.insert(in_dims.end(), k.inputs[i].dims.begin(), k.inputs[i].dims.end());
        const char* base = static_cast<const char*>(t.data());
        if (!batched_args_[i]) {
          in_ptrs[i] = base;
          continue;
        }
        const int64_t row = RowBytes(k.inputs[i]);
        if (!padded) {
          in_ptrs[i] = base + s.start * row;
          continue;
        }
        OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_INT8, TensorShape({tile * row + 1}), &staging_in[i]));
        char* dst = static_cast<char*>(staging_in[i].data());
        if (s.rows > 0) std::memcpy(dst, base + s.start * row, s.rows * row);
        std::memset(dst + s.rows * row, 0, (tile - s.rows) * row);
        in_ptrs[i] = dst;
      }
      if (in_dims.empty()) in_dims.push_back(0);
      for (int j = 0; j < n_out; ++j) {
        char* base = static_cast<char*>(outs[j]->data());
        const int64_t row = RowBytes(k.outputs[j]);
        const bool write_here = batched_results_[j] ? !padded : step == 0;
        if (write_here) {
          out_ptrs[j] = batched_results_[j] ? base + s.start * row : base;
          continue;
        }
        const int64_t bytes = batched_results_[j] ? tile * row : outs[j]->TotalBytes();
        OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_INT8, TensorShape({bytes + 1}), &staging_out[j]));
        out_ptrs[j] = staging_out[j].data();
      }
      OP_REQUIRES_OK(ctx, Run(k, in_ptrs.data(), in_dims.data(), out_ptrs.data(), scratch, rt));
      for (int j = 0; j < n_out; ++j) {
        if (!batched_results_[j] || !padded || s.rows == 0) continue;
        const int64_t row = RowBytes(k.outputs[j]);
        std::memcpy(static_cast<char*>(outs[j]->data()) + s.start * row, out_ptrs[j], s.rows * row);
      }
    }
  }

  absl::Status Scratch(OpKernelContext* ctx, int64_t bytes, Tensor* t, char** out) {
    *out = ScratchFallback();
    if (bytes <= 0) return absl::OkStatus();
    TF_RETURN_IF_ERROR(ctx->allocate_temp(tensorflow::DT_INT8, TensorShape({bytes + kScratchAlign}), t));
    const uintptr_t base = reinterpret_cast<uintptr_t>(t->data());
    *out = reinterpret_cast<char*>((base + kScratchAlign - 1) & ~uintptr_t(kScratchAlign - 1));
    return absl::OkStatus();
  }

  absl::Status Run(const LoadedKernel& k, const void* const* in, const int64_t* in_dims, void* const* out,
                   char* scratch, const tfxla_runtime* rt) const {
    char err[kErrLen];
    err[0] = '\0';
    const int status = k.run(k.state, in, in_dims, out, scratch, rt, err, sizeof(err));
    err[kErrLen - 1] = '\0';
    if (status == 0) return absl::OkStatus();
    return Failed(k, status, err);
  }

  absl::Status Failed(const LoadedKernel& k, int status, const char* err) const {
    // The kernel refused the data (a gather index outside its operand): TF's error with TF's message.
    constexpr int kStatusInvalidArgument = 3;  // backends/codegen/abi.py STATUS_INVALID_ARGUMENT
    if (status == kStatusInvalidArgument) {
      return InvalidArgument(err[0] ? err : "invalid argument", " (TfxlaLaunch cluster '", cluster_, "', kernel ",
                             k.Name(), ")");
    }
    return Internal("TfxlaLaunch cluster '", cluster_, "': kernel ", k.Name(), " failed (status ", status,
                    "): ", err[0] ? err : "no message");
  }

  // A 64-byte aligned stand-in for kernels that need no scratch.
  static char* ScratchFallback() {
    alignas(64) static char dummy[kScratchAlign];
    return dummy;
  }

  // The loaded kernels for `paths`, checked once per (op, paths) against this node's attrs.
  absl::Status Resolve(const std::vector<std::string>& paths, std::vector<const LoadedKernel*>* out) {
    {
      absl::MutexLock lock(&mu_);
      if (!cached_.empty() && cached_paths_ == paths) {
        *out = cached_;
        return absl::OkStatus();
      }
    }
    std::vector<const LoadedKernel*> ks(paths.size(), nullptr);
    for (size_t i = 0; i < paths.size(); ++i) {
      TF_RETURN_IF_ERROR(ResolveOne(paths[i], i, &ks[i]));
      TF_RETURN_IF_ERROR(CheckAttrs(*ks[i]));
      if (!batch_tiles_.empty()) TF_RETURN_IF_ERROR(CheckTile(*ks[i], *ks[0], batch_tiles_[i]));
    }
    absl::MutexLock lock(&mu_);
    cached_paths_ = paths;
    cached_ = ks;
    *out = ks;
    return absl::OkStatus();
  }

  // The kernel at `path`, or (when this node records source hashes) the one rebuilt from the source
  // beside it if the file cannot be used here. See rebuild.h.
  absl::Status ResolveOne(const std::string& path, size_t i, const LoadedKernel** out) {
    const std::string& so_hash = kernel_hashes_.empty() ? kernel_hash_ : kernel_hashes_[i];
    if (source_hashes_.empty()) return KernelTable::Get().Lookup(path, so_hash, out);
    std::string why;
    const std::vector<std::string> missing = MissingCpuFeatures(cpu_features_);
    if (!missing.empty()) {
      why = absl::StrCat("was built for CPU features this machine lacks (", absl::StrJoin(missing, ", "), ")");
    } else {
      TF_RETURN_IF_ERROR(KernelTable::Get().Lookup(path, so_hash, out, &why));
      if (*out != nullptr) return absl::OkStatus();
    }
    RebuildRequest r;
    r.why = why;
    r.where = absl::StrCat("TfxlaLaunch node '", name(), "' (cluster '", cluster_, "'): tfxla kernel '", path, "' ", why);
    if (rebuild_argvs_.empty())
      return FailedPrecondition(r.where, ", and this model was wrapped by an older tfxla-plugin, which rebuilt kernels "
                                "through Python; the op no longer does: re-wrap the model with this version "
                                "(tfxla wrap), or on this machine");
    if (path.size() < 3 || path.compare(path.size() - 3, 3, ".so") != 0)
      return InvalidArgument(r.where, ", and its name does not end in .so, so there is no source beside it to "
                             "rebuild from");
    r.source = path.substr(0, path.size() - 3) + source_suffix_;
    r.source_sha256 = source_hashes_[i];
    r.backend = backend_.empty() ? "kernel's" : backend_;
    r.argv = rebuild_argvs_[i];
    r.kernel_path = path;
    return RebuiltKernel(r, out);
  }

  absl::Status CheckTile(const LoadedKernel& k, const LoadedKernel& k0, int64_t tile) const {
    const std::string where = absl::StrCat("TfxlaLaunch cluster '", cluster_, "': kernel ", k.Name());
    auto check = [&](const std::vector<TensorSpec>& specs, const std::vector<TensorSpec>& first,
                     const std::vector<int64_t>& batched, const char* what) -> absl::Status {
      for (size_t i = 0; i < specs.size(); ++i) {
        std::vector<int64_t> dims = specs[i].dims, dims0 = first[i].dims;
        if (batched[i]) {
          if (dims.empty() || dims[0] != tile)
            return InvalidArgument(where, ": ", what, " ", i, " is ", specs[i].ToString(), ", not a tile of ", tile,
                                   " rows");
          dims[0] = dims0[0] = 0;
        }
        if (dims != dims0)
          return InvalidArgument(where, ": ", what, " ", i, " is ", specs[i].ToString(), " but the first kernel's is ",
                                 first[i].ToString());
      }
      return absl::OkStatus();
    };
    TF_RETURN_IF_ERROR(check(k.inputs, k0.inputs, batched_args_, "input"));
    return check(k.outputs, k0.outputs, batched_results_, "output");
  }

  absl::Status CheckAttrs(const LoadedKernel& k) const {
    const std::string where = absl::StrCat("TfxlaLaunch cluster '", cluster_, "': kernel ", k.Name());
    if (tin_.size() != k.inputs.size())
      return InvalidArgument(where, " takes ", k.inputs.size(), " input(s), but the op passes ", tin_.size());
    for (size_t i = 0; i < tin_.size(); ++i)
      if (tin_[i] != k.inputs[i].dtype && tin_[i] != tensorflow::DT_RESOURCE)
        return InvalidArgument(where, ": input ", i, " has dtype ", DataTypeString(tin_[i]),
                               ", but the kernel was compiled for ", k.inputs[i].ToString(), " (",
                               DataTypeString(k.inputs[i].dtype), ")");
    if (tout_.size() != k.outputs.size())
      return InvalidArgument(where, " returns ", k.outputs.size(), " output(s), but the op declares ",
                             tout_.size());
    for (size_t j = 0; j < tout_.size(); ++j) {
      if (tout_[j] != k.outputs[j].dtype)
        return InvalidArgument(where, ": output ", j, " is declared ", DataTypeString(tout_[j]),
                               ", but the kernel returns ", k.outputs[j].ToString(), " (",
                               DataTypeString(k.outputs[j].dtype), ")");
      if (!output_shapes_[j].IsCompatibleWith(PartialTensorShape(k.outputs[j].dims)))
        return InvalidArgument(where, ": output ", j, " is declared with shape ",
                               output_shapes_[j].DebugString(), ", but the kernel returns ",
                               k.outputs[j].ToString());
    }
    return absl::OkStatus();
  }

  tensorflow::DataTypeVector tin_;
  tensorflow::DataTypeVector tout_;
  std::vector<PartialTensorShape> output_shapes_;
  std::string cluster_;
  std::string kernel_hash_;
  std::vector<int64_t> batch_tiles_;
  std::vector<int64_t> batched_args_;
  std::vector<int64_t> batched_results_;
  std::vector<std::string> kernel_hashes_;
  std::vector<std::string> source_hashes_;
  std::vector<std::string> cpu_features_;
  std::vector<std::string> rebuild_commands_;
  std::vector<std::vector<std::string>> rebuild_argvs_;  // parsed, with the placeholders
  std::string backend_;
  std::string source_suffix_;
  int n_kernels_ = 1;

  absl::Mutex mu_;
  std::vector<std::string> cached_paths_ ABSL_GUARDED_BY(mu_);
  std::vector<const LoadedKernel*> cached_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("TfxlaLaunch").Device(tensorflow::DEVICE_CPU).HostMemory("kernel_path"),
                        TfxlaLaunchOp);

}  // namespace tfxla
