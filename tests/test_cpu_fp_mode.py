"""Kernels compute in the calling thread's floating-point mode, whatever their OpenMP team inherited.

TensorFlow runs ops with flush-to-zero / denormals-are-zero set, and an OpenMP team created while a
kernel runs inside an eager TF op keeps that mode. A later call from plain Python (IEEE mode) on the
same thread must still produce IEEE subnormals on every thread, i.e. the evaluator's results. The
check runs in a fresh process, so that the team is first created inside TensorFlow.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import numpy as np, tensorflow as tf
    import backends.cpu, hlo
    from tfxla_plugin import _op
    N = 1 << 20  # large enough that the loop runs on the whole OpenMP team
    module = hlo.parse_module(f'''HloModule exp_subnormal
    ENTRY e {{
      x = f32[{N}] parameter(0)
      ROOT y = f32[{N}] exponential(x)
    }}''')
    exe = backends.cpu.compile(module)
    x = np.linspace(-103.0, -87.0, N, dtype=np.float32)  # exp(x) spans the subnormal range
    (want,) = hlo.evaluate(module, x)
    assert np.count_nonzero((want > 0) & (want < np.finfo(np.float32).tiny)) > N // 2
    # First inside TensorFlow (FTZ/DAZ on): the team is created in that mode...
    (in_tf,) = _op.load_op_library().tfxla_launch(kernel_path=str(exe.path), args=[tf.constant(x)],
                                                  Tout=[tf.float32], output_shapes=[[N]], cluster="fp", kernel_hash="")
    # ...then from plain Python on the same thread.
    worst = 0
    for _ in range(3):
        out = exe(x)
        got = out[0] if isinstance(out, (list, tuple)) else out
        diff = np.abs(got.view(np.int32).astype(np.int64) - want.view(np.int32).astype(np.int64))
        worst = max(worst, int(diff.max()))
    print("max ulp", worst)
""")


def test_kernels_use_the_callers_fp_mode_on_every_thread() -> None:
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    worst = int(proc.stdout.split("max ulp")[-1])
    # The vector exp is within 2 ulp everywhere (tests/test_vmath.py); a flushed subnormal is millions off.
    assert worst <= 2, f"{worst} ulp: some OpenMP threads flushed subnormals to zero"
