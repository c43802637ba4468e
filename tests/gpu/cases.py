"""HLO modules that exercise every CUDA kernel strategy, the corpus snapshot, and output comparison.

``MODULES`` are small hand-written modules (name -> HLO text), each aimed at
one strategy or host step: elementwise loops (float4 and scalar), row, split
and column reductions, a variadic (argmax) reduction, tiled transposes, tiled
dots (f32, batched f16, transposed operand), softmax and layer norm, while and
conditional, sort and scatter, f16/bf16/integer element types, and depthwise
convolutions (bias + relu6 epilogue, stride 2, multiplier 2, f16, NCHW with
rhs dilation and reversal, 1-D f64). They run
through ``backends.cuda.pipeline.optimize`` first, so they test fusions.

``corpus()`` reads ``tests/gpu/corpus.npz`` (written by ``python -m
tests.gpu.snapshot`` where TensorFlow is installed): the XLA-dumped test corpus
(both stages) with each case's inputs, for machines without TensorFlow.

``compare`` checks outputs against the evaluator with the tolerances of the
CPU backend's pipeline tests (f32 rtol 1e-4 / atol 1e-5: sums are reassociated
and GPU math functions are within 2 ulp; f16/bf16 1e-2; ints and pred exact).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus.npz"

_ADD = """
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""
_MAX = """
max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
"""

MODULES: dict[str, str] = {
    "gelu": """HloModule gelu
ENTRY main {
  x = f32[64,300] parameter(0)
  half = f32[] constant(0.5)
  one = f32[] constant(1)
  c = f32[] constant(0.0356774)
  k = f32[] constant(0.797885)
  h = f32[64,300] broadcast(half), dimensions={}
  o = f32[64,300] broadcast(one), dimensions={}
  cb = f32[64,300] broadcast(c), dimensions={}
  kb = f32[64,300] broadcast(k), dimensions={}
  x2 = f32[64,300] multiply(x, x)
  x3 = f32[64,300] multiply(x2, x)
  t1 = f32[64,300] multiply(cb, x3)
  t2 = f32[64,300] multiply(kb, x)
  inner = f32[64,300] add(t1, t2)
  th = f32[64,300] tanh(inner)
  s = f32[64,300] add(o, th)
  hx = f32[64,300] multiply(h, x)
  ROOT y = f32[64,300] multiply(hx, s)
}
""",
    "odd_loop_f64_int": """HloModule odd
ENTRY main {
  x = f64[7,13] parameter(0)
  i = s32[7,13] parameter(1)
  e = f64[7,13] exponential(x)
  two = s32[] constant(2)
  tb = s32[7,13] broadcast(two), dimensions={}
  d = s32[7,13] divide(i, tb)
  sh = s32[7,13] shift-left(i, tb)
  c = pred[7,13] compare(d, sh), direction=LT
  ROOT t = (f64[7,13], s32[7,13], pred[7,13]) tuple(e, d, c)
}
""",
    "reductions": f"""HloModule reductions
{_ADD}
{_MAX}
ENTRY main {{
  x = f32[64,300] parameter(0)
  y = f32[8,20000] parameter(1)
  z = f32[1000,10,3] parameter(2)
  w = f32[4,500,33] parameter(3)
  zero = f32[] constant(0)
  ninf = f32[] constant(-inf)
  e = f32[64,300] exponential(x)
  r1 = f32[64] reduce(e, zero), dimensions={{1}}, to_apply=add
  r2 = f32[8] reduce(y, ninf), dimensions={{1}}, to_apply=max
  r3 = f32[3] reduce(z, zero), dimensions={{0,1}}, to_apply=add
  r4 = f32[4,33] reduce(w, zero), dimensions={{1}}, to_apply=add
  ROOT t = (f32[64], f32[8], f32[3], f32[4,33]) tuple(r1, r2, r3, r4)
}}
""",
    "full_reduce": f"""HloModule full_reduce
{_ADD}
ENTRY main {{
  x = f32[70000] parameter(0)
  w = f32[70000] parameter(1)
  b = f32[70000] parameter(2)
  m = f32[70000] parameter(3)
  xw = f32[70000] multiply(x, w)
  xwb = f32[70000] add(xw, b)
  p = f32[70000] multiply(xwb, m)
  zero = f32[] constant(0)
  ROOT r = f32[] reduce(p, zero), dimensions={{0}}, to_apply=add
}}
""",
    "argmax": """HloModule argmax
argmax {
  av = f32[] parameter(0)
  ai = s32[] parameter(1)
  bv = f32[] parameter(2)
  bi = s32[] parameter(3)
  gt = pred[] compare(av, bv), direction=GT
  eq = pred[] compare(av, bv), direction=EQ
  lt = pred[] compare(ai, bi), direction=LT
  tie = pred[] and(eq, lt)
  keep = pred[] or(gt, tie)
  v = f32[] select(keep, av, bv)
  i = s32[] select(keep, ai, bi)
  ROOT r = (f32[], s32[]) tuple(v, i)
}

ENTRY main {
  x = f32[16,500] parameter(0)
  iota = s32[16,500] iota(), iota_dimension=1
  ninf = f32[] constant(-inf)
  zero = s32[] constant(0)
  ROOT r = (f32[16], s32[16]) reduce(x, iota, ninf, zero), dimensions={1}, to_apply=argmax
}
""",
    "transposes": """HloModule transposes
ENTRY main {
  x = f32[3,100,200] parameter(0)
  y = f32[130,257] parameter(1)
  t1 = f32[3,200,100] transpose(x), dimensions={0,2,1}
  e = f32[130,257] exponential(y)
  t2 = f32[257,130] transpose(e), dimensions={1,0}
  ROOT t = (f32[3,200,100], f32[257,130]) tuple(t1, t2)
}
""",
    "dots": """HloModule dots
ENTRY main {
  a = f32[128,300] parameter(0)
  b = f32[300,70] parameter(1)
  h = f16[2,64,32] parameter(2)
  hb = f16[2,32,80] parameter(3)
  at = f32[300,96] parameter(4)
  d1 = f32[128,70] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  d2 = f16[2,64,80] dot(h, hb), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}
  d3 = f32[96,70] dot(at, b), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  ROOT t = (f32[128,70], f16[2,64,80], f32[96,70]) tuple(d1, d2, d3)
}
""",
    "tensor_cores": """HloModule tensor_cores
ENTRY main {
  a = bf16[3,77,50] parameter(0)
  b = bf16[3,50,45] parameter(1)
  bias = f32[45] parameter(2)
  x = f16[2,9,9,24] parameter(3)
  k = f16[3,3,24,40] parameter(4)
  w = f32[100,36] parameter(5)
  v = f16[36,130] parameter(6)
  d = bf16[3,77,45] dot(a, b), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}
  df = f32[3,77,45] convert(d)
  bb = f32[3,77,45] broadcast(bias), dimensions={2}
  db = f32[3,77,45] add(df, bb)
  zero = f32[] constant(0)
  zb = f32[3,77,45] broadcast(zero), dimensions={}
  dr = f32[3,77,45] maximum(db, zb)
  c = f16[2,9,9,40] convolution(x, k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  wh = f16[100,36] convert(w)
  mixed = f32[100,130] dot(wh, v), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = (f32[3,77,45], f16[2,9,9,40], f32[100,130]) tuple(dr, c, mixed)
}
""",
    "convolutions": """HloModule convolutions
ENTRY main {
  x = f32[2,16,16,8] parameter(0)
  k = f32[3,3,8,16] parameter(1)
  b = f32[16] parameter(2)
  dw = f32[3,3,1,8] parameter(3)
  xc = f32[2,8,17,17] parameter(4)
  kc = f32[16,8,2,2] parameter(5)
  c = f32[2,16,16,16] convolution(x, k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  bb = f32[2,16,16,16] broadcast(b), dimensions={3}
  cb = f32[2,16,16,16] add(c, bb)
  s = f32[2,8,8,16] convolution(x, k), window={size=3x3 stride=2x2 pad=0_1x0_1}, dim_labels=b01f_01io->b01f
  d = f32[2,16,16,8] convolution(x, dw), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=8
  n = f32[2,16,8,8] convolution(xc, kc), window={size=2x2 stride=2x2 rhs_dilate=2x2}, dim_labels=bf01_oi01->bf01
  ROOT t = (f32[2,16,16,16], f32[2,8,8,16], f32[2,16,16,8], f32[2,16,8,8]) tuple(cb, s, d, n)
}
""",
    "softmax": f"""HloModule softmax
{_ADD}
{_MAX}
ENTRY main {{
  x = f32[37,1000] parameter(0)
  ninf = f32[] constant(-inf)
  zero = f32[] constant(0)
  m = f32[37] reduce(x, ninf), dimensions={{1}}, to_apply=max
  mb = f32[37,1000] broadcast(m), dimensions={{0}}
  s = f32[37,1000] subtract(x, mb)
  e = f32[37,1000] exponential(s)
  d = f32[37] reduce(e, zero), dimensions={{1}}, to_apply=add
  db = f32[37,1000] broadcast(d), dimensions={{0}}
  ROOT y = f32[37,1000] divide(e, db)
}}
""",
    "layer_norm": f"""HloModule layer_norm
{_ADD}
ENTRY main {{
  x = f32[64,512] parameter(0)
  g = f32[512] parameter(1)
  b = f32[512] parameter(2)
  zero = f32[] constant(0)
  n = f32[] constant(0.001953125)
  eps = f32[] constant(1e-5)
  s = f32[64] reduce(x, zero), dimensions={{1}}, to_apply=add
  nb = f32[64] broadcast(n), dimensions={{}}
  mean = f32[64] multiply(s, nb)
  mb = f32[64,512] broadcast(mean), dimensions={{0}}
  c = f32[64,512] subtract(x, mb)
  c2 = f32[64,512] multiply(c, c)
  v = f32[64] reduce(c2, zero), dimensions={{1}}, to_apply=add
  var = f32[64] multiply(v, nb)
  eb = f32[64] broadcast(eps), dimensions={{}}
  ve = f32[64] add(var, eb)
  r = f32[64] rsqrt(ve)
  rb = f32[64,512] broadcast(r), dimensions={{0}}
  y = f32[64,512] multiply(c, rb)
  gb = f32[64,512] broadcast(g), dimensions={{1}}
  bb = f32[64,512] broadcast(b), dimensions={{1}}
  yg = f32[64,512] multiply(y, gb)
  ROOT out = f32[64,512] add(yg, bb)
}}
""",
    "control_flow": """HloModule control_flow
cond {
  p = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  p = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  v = f32[8] get-tuple-element(p), index=1
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  h = f32[] constant(1.5)
  hb = f32[8] broadcast(h), dimensions={}
  v1 = f32[8] multiply(v, hb)
  ROOT t = (s32[], f32[8]) tuple(i1, v1)
}

neg {
  a = f32[8] parameter(0)
  ROOT n = f32[8] negate(a)
}

ident {
  a = f32[8] parameter(0)
  ROOT c = f32[8] copy(a)
}

ENTRY main {
  x = f32[8] parameter(0)
  flag = pred[] parameter(1)
  zero = s32[] constant(0)
  init = (s32[], f32[8]) tuple(zero, x)
  w = (s32[], f32[8]) while(init), condition=cond, body=body
  v = f32[8] get-tuple-element(w), index=1
  c = f32[8] conditional(flag, v, x), true_computation=neg, false_computation=ident
  ROOT t = (f32[8], f32[8]) tuple(v, c)
}
""",
    "sort_scatter": f"""HloModule sort_scatter
{_ADD}
less {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  ROOT lt = pred[] compare(a, b), direction=LT
}}

ENTRY main {{
  x = f32[4,50] parameter(0)
  iota = s32[4,50] iota(), iota_dimension=1
  s = (f32[4,50], s32[4,50]) sort(x, iota), dimensions={{1}}, to_apply=less
  op = f32[10,3] parameter(1)
  idx = s32[6,1] parameter(2)
  upd = f32[6,3] parameter(3)
  sc = f32[10,3] scatter(op, idx, upd), update_window_dims={{1}}, inserted_window_dims={{0}}, scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, to_apply=add
  sv = f32[4,50] get-tuple-element(s), index=0
  si = s32[4,50] get-tuple-element(s), index=1
  ROOT t = (f32[4,50], s32[4,50], f32[10,3]) tuple(sv, si, sc)
}}
""",
    # The serial strategy's kernels in f16 (a scatter combining with an f16 add, rounded per update; a
    # sort with an f16 comparator; TopK): device code spells f16 __half, never _Float16.
    "sort_scatter_f16": """HloModule sort_scatter_f16
add_h {
  a = f16[] parameter(0)
  b = f16[] parameter(1)
  ROOT s = f16[] add(a, b)
}
greater_h {
  a = f16[] parameter(0)
  b = f16[] parameter(1)
  ROOT gt = pred[] compare(a, b), direction=GT
}

ENTRY main {
  x = f16[3,20] parameter(0)
  s = f16[3,20] sort(x), dimensions={1}, to_apply=greater_h
  op = f16[7,2] parameter(1)
  idx = s32[5,1] parameter(2)
  upd = f16[5,2] parameter(3)
  sc = f16[7,2] scatter(op, idx, upd), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add_h
  tk = (f16[3,4], s32[3,4]) topk(x), k=4, largest=true
  tv = f16[3,4] get-tuple-element(tk), index=0
  ti = s32[3,4] get-tuple-element(tk), index=1
  ROOT t = (f16[3,20], f16[7,2], f16[3,4], s32[3,4]) tuple(s, sc, tv, ti)
}
""",
    "narrow_floats": f"""HloModule narrow
{_ADD}
ENTRY main {{
  h = f16[33,40] parameter(0)
  b = bf16[33,40] parameter(1)
  e = f16[33,40] exponential(h)
  hf = f32[33,40] convert(e)
  bf = f32[33,40] convert(b)
  s = f32[33,40] add(hf, bf)
  zero = f32[] constant(0)
  r = f32[33] reduce(s, zero), dimensions={{1}}, to_apply=add
  t = bf16[33] convert(r)
  ROOT o = (f16[33,40], bf16[33]) tuple(e, t)
}}
""",
    "depthwise": """HloModule depthwise
ENTRY main {
  x = f32[2,9,11,24] parameter(0)
  w = f32[3,3,1,24] parameter(1)
  b = f32[24] parameter(2)
  xs = f32[4,16,18,32] parameter(3)
  ws = f32[3,3,1,32] parameter(4)
  xm = f32[2,12,10,8] parameter(5)
  wm = f32[3,3,1,16] parameter(6)
  xh = f16[2,9,11,24] parameter(7)
  wh = f16[5,5,1,24] parameter(8)
  xc = f32[2,8,12,10] parameter(9)
  wc = f32[16,1,3,3] parameter(10)
  xd = f64[8,100,32] parameter(11)
  wd = f64[2,1,32] parameter(12)
  c = f32[2,9,11,24] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=24
  bb = f32[2,9,11,24] broadcast(b), dimensions={3}
  cb = f32[2,9,11,24] add(c, bb)
  zero = f32[] constant(0)
  six = f32[] constant(6)
  zb = f32[2,9,11,24] broadcast(zero), dimensions={}
  sb = f32[2,9,11,24] broadcast(six), dimensions={}
  relu6 = f32[2,9,11,24] clamp(zb, cb, sb)
  s = f32[4,8,9,32] convolution(xs, ws), window={size=3x3 stride=2x2 pad=0_1x0_1}, dim_labels=b01f_01io->b01f, feature_group_count=32
  m = f32[2,12,10,16] convolution(xm, wm), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=8
  h = f16[2,9,11,24] convolution(xh, wh), window={size=5x5 pad=2_2x2_2}, dim_labels=b01f_01io->b01f, feature_group_count=24
  n = f32[2,16,12,10] convolution(xc, wc), window={size=3x3 pad=2_2x2_2 rhs_dilate=2x2 rhs_reversal=0x1}, dim_labels=bf01_oi01->bf01, feature_group_count=8
  o = f64[8,33,32] convolution(xd, wd), window={size=2 stride=3}, dim_labels=b0f_0io->b0f, feature_group_count=32
  ROOT t = (f32[2,9,11,24], f32[4,8,9,32], f32[2,12,10,16], f16[2,9,11,24], f32[2,16,12,10], f64[8,33,32]) tuple(relu6, s, m, h, n, o)
}
""",
}


def random_args(module, seed: int = 0) -> list[np.ndarray]:
    """Deterministic inputs: normals for floats, small integers (0..9, scatter indices in range), pred."""
    rng = np.random.default_rng(seed)
    out = []
    for p in module.entry.parameters:
        dt = np.dtype(p.shape.dtype.numpy)
        dims = p.shape.dims
        if dt.kind == "b":
            out.append(np.asarray(rng.integers(0, 2, dims).astype(bool)))
        elif dt.kind in "iu":
            out.append(rng.integers(0, 10, dims).astype(dt))
        else:
            out.append(rng.standard_normal(dims).astype(np.float32).astype(dt))
    return out


def tolerance(dtype) -> tuple[float, float]:
    dt = np.dtype(dtype)
    if dt.kind != "f" and dt.name != "bfloat16":
        return 0.0, 0.0
    if dt.itemsize >= 4:
        return (1e-9, 1e-11) if dt.itemsize == 8 else (1e-4, 1e-5)
    return 1e-2, 1e-2


def compare(got, want, what: str) -> list[str]:
    """Mismatch messages (empty when ``got`` matches ``want``)."""
    problems = []
    if len(got) != len(want):
        return [f"{what}: {len(got)} outputs, expected {len(want)}"]
    for k, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape or g.dtype != w.dtype:
            problems.append(f"{what} output {k}: {g.dtype}{list(g.shape)}, expected {w.dtype}{list(w.shape)}")
            continue
        rtol, atol = tolerance(w.dtype)
        if rtol == 0:
            if not np.array_equal(g, w):
                problems.append(f"{what} output {k}: {int(np.sum(g != w))} of {w.size} elements differ")
            continue
        gg, ww = g.astype(np.float64), w.astype(np.float64)
        with np.errstate(invalid="ignore"):  # inf - inf
            bad = ~((np.abs(gg - ww) <= atol + rtol * np.abs(ww)) | (np.isnan(gg) & np.isnan(ww)) | (gg == ww))
        if bad.any():
            i = np.unravel_index(np.argmax(bad), bad.shape)
            problems.append(f"{what} output {k}: {int(bad.sum())} of {w.size} elements outside rtol {rtol} / "
                            f"atol {atol}, e.g. at {tuple(int(x) for x in i)}: {gg[i]} vs {ww[i]}")
    return problems


def corpus() -> list[tuple[str, str, list[np.ndarray]]]:
    """(case name, stage, HLO text, inputs) of the corpus snapshot, or [] when it is absent."""
    if not CORPUS.exists():
        return []
    data = np.load(CORPUS, allow_pickle=False)
    names = [str(n) for n in data["names"]]
    out = []
    for j, name in enumerate(names):
        args = [data[f"{j}_arg{k}"] for k in range(int(data[f"{j}_nargs"]))]
        for stage in ("hlo", "optimized_hlo"):
            out.append((name, stage, str(data[f"{j}_{stage}"]), args))
    return out


def have_gpu() -> str | None:
    """None when PyCUDA and a GPU are usable here, else why not (the reason GPU tests skip)."""
    if os.environ.get("TFXLA_CUDA_TESTS", "") == "0":
        return "TFXLA_CUDA_TESTS=0"
    try:
        import pycuda.driver as drv
    except ImportError:
        return "PyCUDA is not installed (GPU machines: tests/gpu/run.sh installs it)"
    try:
        drv.init()
        if drv.Device.count() == 0:
            return "no CUDA GPU"
    except Exception as e:  # noqa: BLE001
        return f"the CUDA driver is unusable: {e}"
    return None


def have_cuda_device() -> str | None:
    """None when the CUDA driver sees a GPU here (asked through libcuda.so.1 itself: neither PyCUDA nor
    TensorFlow needed, as the host launchers need neither), else why not."""
    import ctypes

    if os.environ.get("TFXLA_CUDA_TESTS", "") == "0":
        return "TFXLA_CUDA_TESTS=0"
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        return f"no CUDA driver (libcuda.so.1: {e})"
    count = ctypes.c_int(0)
    if driver.cuInit(0) != 0 or driver.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return "the CUDA driver could not be initialized"
    return None if count.value > 0 else "no CUDA GPU"
