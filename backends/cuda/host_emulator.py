"""Running generated CUDA kernels on the host, to check their numbers where there is no GPU.

The module's CUDA source is compiled as C++20 by the host compiler with a
small shim (``SHIM``): ``__global__``/``__device__`` vanish, ``__shared__``
becomes ``static`` (blocks run one after another), ``threadIdx``/``blockIdx``
are thread-locals, and the CUDA intrinsics the generator uses get host
versions. A launch runs the grid block by block; a kernel that synchronizes
(``__syncthreads``, warp shuffles) runs each block's threads as real threads
with a block barrier and per-warp barriers (a shuffle exchanges values
through a slot per thread between two warp barriers), any other kernel runs
its threads one after another. ``HostDevice`` implements the runtime's
``Device`` interface over host memory, so ``Executable`` runs the real host
program (copies, while loops, conditionals) on it.

``compile_emulated_launcher`` does the same for a host launcher (``host_launcher.py``): its host code,
unchanged, is compiled against ``FAKE_RUNTIME`` (the few CUDA runtime calls it makes, over host memory)
and kernel launches go to the emulator, so the shared object it builds runs the launcher's real logic
(init, buffer binding, copies, host control flow, the ABI) where there is no GPU, inside TensorFlow too.

What this checks: index arithmetic, fusion bodies, reducers, tiling and
edge handling, the program and buffer assignment. What it cannot: timing,
memory-model subtleties, warp divergence (shuffles here need the whole warp,
as ``__shfl_down_sync(0xffffffff, ...)`` does on the GPU).
"""

from __future__ import annotations

import ctypes
import os
import re

import numpy as np

from backends.toolchain import CompilerOptions, compile_shared_object
from backends.cuda.codegen import GeneratedModule
from backends.cuda.compiler import batch_source
from backends.shared_object import load_library

CUDA_INCLUDE = os.environ.get("TFXLA_CUDA_INCLUDE", "/usr/local/cuda/include")

SHIM = r"""
#include <cstdint>
#include <cstring>
#include <cmath>
#include <atomic>
#include <barrier>
#include <memory>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
using std::isnan; using std::isfinite;
#define __global__
#undef __device__
#define __device__
#undef __forceinline__
#define __forceinline__ inline
#define __launch_bounds__(n)
#undef __shared__
#define __shared__ static
#define __restrict__ __restrict

struct emu_dim3 { unsigned x = 0, y = 0, z = 0; };
static thread_local emu_dim3 threadIdx, blockIdx;
static emu_dim3 blockDim, gridDim;
static std::unique_ptr<std::barrier<>> emu_block_barrier;
static std::vector<std::unique_ptr<std::barrier<>>> emu_warp_barriers;
static unsigned long long emu_slots[1024];
static int emu_threads;

static inline int emu_tid() { return threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y; }
static inline void __syncthreads() { emu_block_barrier->arrive_and_wait(); }
static inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
static inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
template <typename T> static inline T __shfl_down_sync(unsigned, T v, int offset) {
  const int tid = emu_tid();
  std::barrier<>& bar = *emu_warp_barriers[tid / 32];
  std::memcpy(&emu_slots[tid], &v, sizeof(T));
  bar.arrive_and_wait();
  T r = v;
  if (tid % 32 + offset < 32 && tid + offset < emu_threads) std::memcpy(&r, &emu_slots[tid + offset], sizeof(T));
  bar.arrive_and_wait();
  return r;
}
static inline float __uint_as_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline uint32_t __float_as_uint(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
static inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
static inline long long __double_as_longlong(double d) { long long i; std::memcpy(&i, &d, 8); return i; }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }

/* wmma on the host: every thread of a warp holds the whole fragment (loads and the product are
   computed redundantly per thread); a store is made once per warp, between two warp barriers. */
namespace nvcuda { namespace wmma {
struct matrix_a {}; struct matrix_b {}; struct accumulator {}; struct row_major {};
enum layout_t { mem_row_major };
template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment {
  static constexpr int rows = std::is_same_v<Use, matrix_b> ? K : M;
  static constexpr int cols = std::is_same_v<Use, matrix_a> ? K : N;
  static constexpr int num_elements = rows * cols;
  T x[rows * cols];
};
template <typename F, typename V> static inline void fill_fragment(F& f, V v) { for (auto& e : f.x) e = v; }
template <typename Use, int M, int N, int K, typename T, typename L>
static inline void load_matrix_sync(fragment<Use, M, N, K, T, L>& f, const T* p, unsigned ldm) {
  using F = fragment<Use, M, N, K, T, L>;
  for (int r = 0; r < F::rows; ++r) for (int c = 0; c < F::cols; ++c) f.x[r * F::cols + c] = p[r * ldm + c];
}
template <int M, int N, int K, typename T>
static inline void mma_sync(fragment<accumulator, M, N, K, float>& d, const fragment<matrix_a, M, N, K, T, row_major>& a,
                            const fragment<matrix_b, M, N, K, T, row_major>& b, const fragment<accumulator, M, N, K, float>& c) {
  float out[M * N];
  for (int i = 0; i < M; ++i) for (int j = 0; j < N; ++j) {
    float s = c.x[i * N + j];
    for (int k = 0; k < K; ++k) s += (float)a.x[i * K + k] * (float)b.x[k * N + j];
    out[i * N + j] = s;
  }
  std::memcpy(d.x, out, sizeof out);
}
template <int M, int N, int K>
static inline void store_matrix_sync(float* p, const fragment<accumulator, M, N, K, float>& f, unsigned ldm, layout_t) {
  const int tid = emu_tid();
  std::barrier<>& bar = *emu_warp_barriers[tid / 32];
  bar.arrive_and_wait();
  if (tid % 32 == 0) for (int r = 0; r < M; ++r) for (int c = 0; c < N; ++c) p[r * ldm + c] = f.x[r * N + c];
  bar.arrive_and_wait();
}
} }
"""

_LAUNCHER = r"""
template <typename... A, std::size_t... I>
static void emu_call(void (*k)(A...), void** args, std::index_sequence<I...>) { k((A)(args[I])...); }

template <typename... A>
static void emu_launch(void (*k)(A...), const unsigned* g, const unsigned* b, void** args, int sync) {
  gridDim = {g[0], g[1], g[2]};
  blockDim = {b[0], b[1], b[2]};
  emu_threads = (int)(b[0] * b[1] * b[2]);
  for (unsigned bz = 0; bz < g[2]; ++bz) for (unsigned by = 0; by < g[1]; ++by) for (unsigned bx = 0; bx < g[0]; ++bx) {
    auto run = [&](unsigned t) {
      blockIdx = {bx, by, bz};
      threadIdx = {t % b[0], (t / b[0]) % b[1], t / (b[0] * b[1])};
      emu_call(k, args, std::index_sequence_for<A...>{});
    };
    if (!sync) { for (int t = 0; t < emu_threads; ++t) run((unsigned)t); continue; }
    emu_block_barrier = std::make_unique<std::barrier<>>(emu_threads);
    emu_warp_barriers.clear();
    for (int w = 0; w < emu_threads; w += 32)
      emu_warp_barriers.push_back(std::make_unique<std::barrier<>>(std::min(32, emu_threads - w)));
    std::vector<std::thread> threads;
    for (int t = 0; t < emu_threads; ++t) threads.emplace_back(run, (unsigned)t);
    for (auto& t : threads) t.join();
  }
}
"""


def needs_block_threads(source: str, kernel: str) -> bool:
    """Whether ``kernel`` synchronizes its block (barriers, shuffles): its threads then run as real threads."""
    body = source.split(f" {kernel}(", 1)[1].split('extern "C"', 1)[0]
    return "__syncthreads" in body or "shfl" in body


def host_source(modules: list[GeneratedModule]) -> str:
    """Modules' CUDA sources as one host C++ translation unit: the shim, the modules as ``batch_source``
    lays them out (module ``j`` in namespace ``m<j>``, kernels renamed ``m<j>_k<N>_...``), and per module
    an ``emu_m<j>_<kernel>`` launcher per kernel and an ``emu_global_m<j>_<symbol>`` accessor per
    ``__device__`` array."""
    text = batch_source([g.source for g in modules]).replace("#include <cuda_fp16.h>", "")
    out = [SHIM, text, _LAUNCHER]
    for j, g in enumerate(modules):
        for name in g.kernels:
            out.append(f'extern "C" void emu_m{j}_{name}(const unsigned* g, const unsigned* b, void** a, int s) '
                       f'{{ emu_launch(m{j}::m{j}_{name}, g, b, a, s); }}')
        for sym in sorted(set(_GLOBAL.findall(g.source))):
            out.append(f'extern "C" void* emu_global_m{j}_{sym}() {{ return (void*)m{j}::{sym}; }}')
    return "\n".join(out) + "\n"


_GLOBAL = re.compile(r"^(?:\[\[maybe_unused\]\] )?__device__ (?:const )?[\w ]+? (k_\d+)\[", re.M)


def host_compiler_options() -> CompilerOptions:
    return CompilerOptions(cc=os.environ.get("CXX", "g++"), opt_flags=("-O1",), target_flags=(), openmp=False,
                           extra_flags=("-std=c++20", "-pthread", "-w", f"-I{CUDA_INCLUDE}", "-x", "c++"),
                           libraries=("-lm",))


class HostLibrary:
    """Modules compiled together for the host (one compiler run, cached); ``device(j)`` runs module j."""

    def __init__(self, modules: list[GeneratedModule], cache_dir: str | None = None):
        self.modules = modules
        compiled = compile_shared_object(host_source(modules), host_compiler_options(), cache_dir, name="emu")
        self.lib = load_library(compiled.path, compiled.sha256)

    def device(self, j: int) -> "HostDevice":
        return HostDevice(self, j)


class HostDevice:
    """The runtime's ``Device`` over host memory, running module ``j`` of a ``HostLibrary``."""

    def __init__(self, library: HostLibrary, j: int):
        self.lib = library.lib
        self.prefix = f"m{j}_"
        generated = library.modules[j]
        self._memory: list[np.ndarray] = []
        self._sync = {name: needs_block_threads(generated.source, name) for name in generated.kernels}

    def load(self, fatbin: bytes, kernels) -> None:
        pass

    def alloc(self, nbytes: int) -> int:
        buf = np.zeros(max(int(nbytes), 256) + 64, np.uint8)
        self._memory.append(buf)
        return buf.ctypes.data + (-buf.ctypes.data) % 64

    def global_ptr(self, symbol: str) -> int:
        fn = getattr(self.lib, f"emu_global_{self.prefix}{symbol}")
        fn.restype = ctypes.c_void_p
        return int(fn())

    def htod(self, ptr: int, array: np.ndarray) -> None:
        if array.nbytes:
            ctypes.memmove(ptr, np.ascontiguousarray(array).ctypes.data, array.nbytes)

    def dtoh(self, array: np.ndarray, ptr: int) -> None:
        if array.nbytes:
            ctypes.memmove(array.ctypes.data, ptr, array.nbytes)

    def dtod(self, dst: int, src: int, nbytes: int) -> None:
        ctypes.memmove(dst, src, nbytes)

    def launch(self, kernel: str, grid, block, args, shared_bytes: int) -> None:
        fn = getattr(self.lib, f"emu_{self.prefix}{kernel}")
        g = (ctypes.c_uint * 3)(*grid)
        b = (ctypes.c_uint * 3)(*block)
        a = (ctypes.c_void_p * max(len(args), 1))(*args)
        fn(g, b, a, ctypes.c_int(1 if self._sync[kernel] else 0))

    def synchronize(self) -> None:
        pass


def host_executables(modules, cache_dir: str | None = None) -> list:
    """``Executable``s for ``modules`` whose kernels run on the host (no GPU, no PyCUDA, no nvcc), all
    compiled in one host compiler run. Each module is verified, goes through the CUDA backend's
    kernel-shape passes (as ``runtime.compile`` runs them) and is generated here."""
    from backends.cuda.codegen import generate
    from backends.cuda.pipeline import prepare
    from backends.cuda.runtime import Executable
    from hlo.verifier import verify

    prepared = []
    for m in modules:
        verify(m)
        prepared.append(prepare(m))
    generated = [generate(m) for m in prepared]
    library = HostLibrary(generated, cache_dir)
    return [Executable(m, g, _NoFatbin(), device_factory=lambda j=j: library.device(j))
            for j, (m, g) in enumerate(zip(prepared, generated))]


def host_executable(module, cache_dir: str | None = None):
    return host_executables([module], cache_dir)[0]


class _NoFatbin:
    """Stands in for the fat binary: the host library compiled the source itself."""

    cache_hit = False

    def read(self) -> bytes:
        return b""


# The CUDA runtime calls a host launcher makes, defined over host memory (one device, no failures). The
# runtime's declarations and types come with cuda_fp16.h; these definitions stay inside the object.
FAKE_RUNTIME = r"""
#include <cstdlib>
#pragma GCC visibility push(hidden)
extern "C" {
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char* cudaGetErrorName(cudaError_t e) { return e == cudaSuccess ? "cudaSuccess" : "cudaErrorMemoryAllocation"; }
const char* cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "out of memory"; }
cudaError_t cudaGetDeviceCount(int* n) { *n = 1; return cudaSuccess; }
cudaError_t cudaSetDevice(int) { return cudaSuccess; }
cudaError_t cudaMalloc(void** p, size_t n) {
  const size_t size = (n + 255) / 256 * 256;
  *p = std::aligned_alloc(256, size);
  if (*p == nullptr) return cudaErrorMemoryAllocation;
  std::memset(*p, 0, size);
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) { std::free(p); return cudaSuccess; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  *s = static_cast<cudaStream_t>(std::malloc(1));
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) { std::free(s); return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind, cudaStream_t) {
  std::memmove(dst, src, n);
  return cudaSuccess;
}
cudaError_t cudaGetSymbolAddress(void** p, const void* symbol) { *p = const_cast<void*>(symbol); return cudaSuccess; }
}
template <typename F> cudaError_t cudaFuncSetAttribute(F*, cudaFuncAttribute, int) { return cudaSuccess; }
#pragma GCC visibility pop
"""

_EMULATED_CALL = r"""
template <typename... P>
static void tfxla_call_kernel(void (*k)(P...), const char* name, dim3 grid, dim3 block, size_t, cudaStream_t,
                              void* const* a) {
  const unsigned g[3] = {grid.x, grid.y, grid.z}, b[3] = {block.x, block.y, block.z};
  emu_launch(k, g, b, const_cast<void**>(a), emu_block_threads(name));
}
"""


def emulated_launcher_source(launcher) -> str:
    """A ``host_launcher.LauncherSource`` as host C++: the shim, its kernels, the emulator's launch, the fake
    runtime and the launcher's host code as nvcc would compile it."""
    from backends.cuda.host_launcher import COMMON

    kernels = launcher.kernels.replace("#include <cuda_fp16.h>", "")
    synced = [name for name in launcher.kernel_names if needs_block_threads(launcher.kernels, name)]
    table = ", ".join(f'"{n}"' for n in synced) or "nullptr"
    lookup = (f"static int emu_block_threads(const char* name) {{\n"
              f"  static const char* const names[] = {{{table}}};\n"
              f"  for (const char* n : names) if (n != nullptr && std::strcmp(n, name) == 0) return 1;\n"
              f"  return 0;\n}}\n")
    return "\n".join([SHIM, kernels, _LAUNCHER, FAKE_RUNTIME, lookup, _EMULATED_CALL, COMMON, launcher.host])


def compile_emulated_launcher(launcher, cache_dir: str | None = None):
    """The launcher's emulated shared object (host compiler, cached): the same ABI as the nvcc build."""
    return compile_shared_object(emulated_launcher_source(launcher), host_compiler_options(), cache_dir,
                                 name=f"emu_{launcher.module}")
