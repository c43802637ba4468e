"""Kernels compute in the calling thread's floating-point mode on every thread they run on.

Pool threads keep the floating-point mode (MXCSR: flush-to-zero, denormals-are-zero, rounding) they were
born with, which can differ from the caller's: TensorFlow sets FTZ/DAZ while it runs an op, plain Python
does not. The kernel's task trampoline (``tfxla_in_mode``, backends/cpu/parallel.py) runs each block in
the caller's mode and gives the thread its own back after. Checked in a fresh process with two pools of
the Python runtime: one whose worker is born flushing (FTZ/DAZ), one born in IEEE mode. A task that
records each block's mode runs through the prelude's ``tfxla_parallel`` (every block in the caller's
mode) and straight through the pool (the worker's own mode: the check is not vacuous, and the worker
has its mode back after). Then an exp kernel whose results span the subnormal range runs on each pool:
with an IEEE caller every element is within 2 ulp of the evaluator (a flushed subnormal is millions of
ulp off), with a flushing caller the output is bitwise the single-thread one in that mode.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

# The kernels' own tfxla_parallel (the prelude) on a task that records each block's mode; the first block
# waits (up to 10 s) until the other has run, so that a worker surely runs it however busy the machine is.
PROBE = r"""
static int other_done;
static void record(void* ctx, int64_t b, int64_t e) {
  for (int64_t i = b; i < e; ++i) ((unsigned*)ctx)[i] = _mm_getcsr();
  if (b != 0) { __atomic_store_n(&other_done, 1, __ATOMIC_RELEASE); return; }
  for (int k = 0; k < 10000 && !__atomic_load_n(&other_done, __ATOMIC_ACQUIRE); ++k) usleep(1000);
}
TFXLA_EXPORT unsigned get_csr(void) { return _mm_getcsr(); }
TFXLA_EXPORT void set_csr(unsigned v) { _mm_setcsr(v); }
TFXLA_EXPORT void probe(const tfxla_runtime* rt, unsigned* seen, int direct) {
  __atomic_store_n(&other_done, 0, __ATOMIC_RELEASE);
  if (direct) { rt->parallel_for(rt->pool, 2, record, seen); return; }  /* no trampoline */
  tfxla_rt = rt;
  tfxla_parallel(2, record, seen);
}
"""

SCRIPT = textwrap.dedent("""
    import ctypes, sys
    import numpy as np
    import backends.cpu, hlo
    from backends.cpu.prelude import PRELUDE
    from backends.cpu.runtime import Kernel
    from backends.cpu.thread_pool import runtime
    from backends.toolchain import CompilerOptions, compile_shared_object

    source = "#define _DEFAULT_SOURCE\\n#include <unistd.h>\\n" + PRELUDE + sys.argv[1]
    helper = ctypes.CDLL(str(compile_shared_object(source, CompilerOptions(), name="csr_probe").path))
    helper.get_csr.restype = ctypes.c_uint
    helper.set_csr.argtypes = [ctypes.c_uint]
    FLUSH = 0x8040  # FTZ | DAZ

    def modes(rt, direct=False):
        seen = (ctypes.c_uint * 2)()
        helper.probe(ctypes.byref(rt), seen, int(direct))
        return sorted(m & FLUSH for m in seen)

    ieee = helper.get_csr() & ~FLUSH
    helper.set_csr(ieee | FLUSH)
    flushing = runtime(2)  # its worker is born flushing
    helper.set_csr(ieee)
    plain = runtime(3)  # its workers are born in IEEE mode
    assert modes(flushing, direct=True) == [0, FLUSH]  # a worker in another mode than the caller
    assert modes(flushing) == [0, 0]  # every block in the caller's
    helper.set_csr(ieee | FLUSH)
    assert modes(plain) == [FLUSH, FLUSH]
    helper.set_csr(ieee)
    assert modes(plain, direct=True) == [0, 0] and modes(flushing, direct=True) == [0, FLUSH]  # given back

    N = 1 << 20  # enough work for the loop to run as tasks, long enough for a worker to take its block
    module = hlo.parse_module(f'''HloModule exp_subnormal
    ENTRY e {{
      x = f32[{N}] parameter(0)
      ROOT y = f32[{N}] exponential(x)
    }}''')
    exe = backends.cpu.compile(module)
    assert "tfxla_parallel(" in exe.source
    x = np.linspace(-103.0, -87.0, N, dtype=np.float32)  # exp(x) spans the subnormal range
    (want,) = hlo.evaluate(module, x)
    assert np.count_nonzero((want > 0) & (want < np.finfo(np.float32).tiny)) > N // 2
    worst = 0
    for _ in range(3):
        (got,) = Kernel(exe.path, exe.sha256, num_threads=2).run(x)  # IEEE caller, flushing worker
        diff = np.abs(got.view(np.int32).astype(np.int64) - want.view(np.int32).astype(np.int64))
        worst = max(worst, int(diff.max()))
    print("max ulp", worst)
    helper.set_csr(ieee | FLUSH)  # a flushing caller (as inside a TF op), workers in IEEE mode
    (alone,) = Kernel(exe.path, exe.sha256, num_threads=1).run(x)
    (pooled,) = Kernel(exe.path, exe.sha256, num_threads=3).run(x)
    helper.set_csr(ieee)
    assert np.count_nonzero(alone == 0) > N // 2, "the caller's flushing mode did not flush"
    print("flushed identical", alone.tobytes() == pooled.tobytes())
""")


def test_kernels_use_the_callers_fp_mode_on_every_thread() -> None:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, PROBE], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    worst = int(proc.stdout.split("max ulp")[-1].split()[0])
    # The vector exp is within 2 ulp everywhere (tests/test_vmath.py); a flushed subnormal is millions off.
    assert worst <= 2, f"{worst} ulp: a block ran in the worker's flushing mode"
    assert "flushed identical True" in proc.stdout, "a block ran in a worker's IEEE mode, not the caller's"
