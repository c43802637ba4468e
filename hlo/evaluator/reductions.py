"""Evaluator rules for reduce, reduce-window and select-and-scatter.

All three take a scalar computation. A body that is one commutative op on its
two parameters (add, multiply, maximum, minimum, and, or, xor) uses the NumPy
reduction in the declared element type, folding in the init value first as XLA
does; any other body (variadic argmax-style reducers included) is evaluated on
whole arrays, one step per reduced element, in row-major order (see ``callees``).

Windows follow XLA: the base is dilated (``lhs_dilate``), then padded (pads may
be negative); positions that fall in padding or dilation holes are skipped, so
they never reach the body. ``windowed`` (gathering every window at once) is
shared with convolution.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from hlo.attributes import Window, WindowDim
from hlo.evaluator import Evaluator, eval_rule
from hlo.evaluator.callees import apply, binary_ufunc, body, combine_at
from hlo.ir import HloInstruction
from hlo.opcodes import Opcode

# --- identities -------------------------------------------------------------


def identity(ufunc: np.ufunc, dtype: np.dtype) -> np.ndarray:
    """The identity of a reducible ufunc in ``dtype`` (the fill for skipped window positions)."""
    dtype = np.dtype(dtype)
    if ufunc in (np.add, np.bitwise_or, np.bitwise_xor):
        return np.zeros((), dtype)
    if ufunc is np.multiply:
        return np.ones((), dtype)
    if ufunc is np.bitwise_and:
        return ~np.zeros((), dtype)
    lowest = ufunc is np.maximum
    if dtype == np.bool_:
        return np.array(not lowest)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.array(info.min if lowest else info.max, dtype)
    inf = np.array(-np.inf if lowest else np.inf).astype(dtype)
    if np.isnan(inf.astype(np.float32)):  # a type without infinities (f8e4m3fn)
        finfo = ml_dtypes.finfo(dtype)
        return np.array(finfo.min if lowest else finfo.max, dtype)
    return inf


# --- reduce -------------------------------------------------------------------


@eval_rule(Opcode.REDUCE)
def _reduce(ev: Evaluator, inst: HloInstruction, vals: list[np.ndarray]):
    n = len(vals) // 2
    inputs, inits = vals[:n], vals[n:]
    dims = tuple(sorted(inst.attr("dimensions", ())))
    name = inst.attr("to_apply").name
    ufunc = binary_ufunc(body(ev.module, name)) if n == 1 else None
    if ufunc is not None:
        x = inputs[0]
        return ufunc.reduce(x, axis=dims, initial=inits[0][()], dtype=x.dtype) if dims else \
            ufunc(inits[0], x).astype(x.dtype)
    keep = [d for d in range(inputs[0].ndim) if d not in dims]
    out_dims = tuple(inputs[0].shape[d] for d in keep)
    steps = int(np.prod([inputs[0].shape[d] for d in dims], dtype=np.int64))
    flat = [np.transpose(x, keep + list(dims)).reshape(out_dims + (steps,)) for x in inputs]
    accs = [np.broadcast_to(init, out_dims) for init in inits]
    for k in range(steps):
        accs = apply(ev, name, accs + [x[..., k] for x in flat], out_dims)
    return tuple(accs) if inst.shape.is_tuple else accs[0]


# --- windows ------------------------------------------------------------------


def window_taps(size: int, w: WindowDim) -> tuple[np.ndarray, np.ndarray]:
    """For a base dim of ``size``: source indices and validity, both [outputs, window size].

    Output ``o``'s tap ``k`` reads padded position ``o*stride + k*rhs_dilate``; it is valid
    when that lands on a real (not padding, not dilation-hole) element of the base.
    """
    dilated = (size - 1) * w.lhs_dilate + 1 if size else 0
    padded = w.pad_low + dilated + w.pad_high
    extent = (w.size - 1) * w.rhs_dilate + 1
    outputs = (padded - extent) // w.stride + 1 if padded >= extent and w.size > 0 else 0
    pos = np.arange(outputs)[:, None] * w.stride + np.arange(w.size)[None, :] * w.rhs_dilate - w.pad_low
    valid = (pos >= 0) & (pos < dilated) & (pos % w.lhs_dilate == 0)
    src = np.clip(pos // w.lhs_dilate, 0, max(size - 1, 0))
    return src, valid


def windowed(x: np.ndarray, window: Window, leading: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Gather the windows of ``x`` over its dims after the first ``leading`` ones.

    Returns ``(values, valid)`` of dims ``x.shape[:leading] + outputs + window sizes``
    (``valid`` without the leading dims); invalid positions hold an arbitrary element.
    """
    spatial = x.ndim - leading
    if len(window.dims) != spatial:
        raise ValueError(f"window has {len(window.dims)} dims, operand has {spatial} windowed dims")
    taps = [window_taps(x.shape[leading + i], w) for i, w in enumerate(window.dims)]
    index, mask = [], np.ones((), bool)
    for i, (src, valid) in enumerate(taps):
        shape = [1] * (2 * spatial)
        shape[i], shape[spatial + i] = src.shape
        index.append(src.reshape(shape))
        mask = mask & valid.reshape(shape)
    outs = tuple(s.shape[0] for s, _ in taps) + tuple(s.shape[1] for s, _ in taps)
    mask = np.broadcast_to(mask, outs)
    if x.size == 0:  # nothing is valid; any value will do
        return np.zeros(x.shape[:leading] + outs, x.dtype), mask & False
    return x[(slice(None),) * leading + tuple(index)], mask


@eval_rule(Opcode.REDUCE_WINDOW)
def _reduce_window(ev: Evaluator, inst: HloInstruction, vals: list[np.ndarray]):
    n = len(vals) // 2
    inputs, inits = vals[:n], vals[n:]
    window = inst.attr("window")
    name = inst.attr("to_apply").name
    rank = inputs[0].ndim
    gathered = [windowed(x, window) for x in inputs]
    mask = gathered[0][1]
    out_dims = mask.shape[:rank]
    ufunc = binary_ufunc(body(ev.module, name)) if n == 1 else None
    if ufunc is not None:
        values = np.where(mask, gathered[0][0], identity(ufunc, inputs[0].dtype))
        axes = tuple(range(rank, 2 * rank))
        return ufunc.reduce(values, axis=axes, initial=inits[0][()], dtype=values.dtype) if rank else \
            ufunc(inits[0], values).astype(values.dtype)
    accs = [np.broadcast_to(init, out_dims) for init in inits]
    for tap in np.ndindex(*mask.shape[rank:]):
        at = (Ellipsis,) + tap
        new = apply(ev, name, accs + [g[0][at] for g in gathered], out_dims)
        accs = [np.where(mask[at], b, a) for a, b in zip(accs, new)]
    return tuple(accs) if inst.shape.is_tuple else accs[0]


# --- select-and-scatter ---------------------------------------------------------


@eval_rule(Opcode.SELECT_AND_SCATTER)
def _select_and_scatter(ev: Evaluator, inst: HloInstruction, vals: list[np.ndarray]):
    operand, source, init = vals
    window = inst.attr("window")
    rank = operand.ndim
    flat_index = np.arange(operand.size).reshape(operand.shape)
    values, mask = windowed(operand, window)
    positions, _ = windowed(flat_index, window)
    out_dims = mask.shape[:rank]
    if out_dims != source.shape:
        raise ValueError(f"source dims {source.shape} do not match the window outputs {out_dims}")
    # Walk each window in row-major order; keep the current pick unless select(current, new) is false.
    select = inst.attr("select").name
    cur_val = np.zeros(out_dims, operand.dtype)
    cur_pos = np.full(out_dims, -1, np.int64)
    have = np.zeros(out_dims, bool)
    for tap in np.ndindex(*mask.shape[rank:]):
        at = (Ellipsis,) + tap
        valid = mask[at]
        keep = apply(ev, select, [cur_val, values[at]], out_dims)[0].astype(bool)
        take = valid & (~have | ~keep)
        cur_val = np.where(take, values[at], cur_val)
        cur_pos = np.where(take, positions[at], cur_pos)
        have |= valid
    out = np.full(operand.size, init, operand.dtype)
    picked = have.reshape(-1)
    combine_at(ev, inst.attr("scatter").name, [out], cur_pos.reshape(-1)[picked],
               [source.reshape(-1)[picked].astype(operand.dtype)])
    return out.reshape(operand.shape)
