"""Evaluator rules for dot and convolution (vectorized NumPy, batched matmuls).

Products accumulate in the result's element type, except that floats narrower
than f32 (f16, bf16, f8) accumulate in f32 and round once, as XLA's CPU and GPU
backends do; integer products wrap in the result type.

dot: the result dims are XLA's: batch dims, then lhs free dims, then rhs free
dims, each group in operand order.

convolution: operands are brought to [batch, feature, spatial...] and
[out-feature, in-feature, spatial...]; the input's windows are gathered with the
same taps as reduce-window (lhs_dilate, possibly negative padding, stride,
rhs_dilate; positions in padding or dilation holes count as zero), the kernel is
flipped where ``rhs_reversal`` says so, and one batched matmul per group does
the rest. ``feature_group_count`` G splits input features into G groups and the
kernel's output features into G consecutive blocks; ``batch_group_count`` B
splits the input batch into B groups and the kernel's output features into B
consecutive blocks, the output batch being input batch / B.
"""

from __future__ import annotations

import numpy as np

from hlo.attributes import ConvDimLabels
from hlo.evaluator import Evaluator, eval_rule
from hlo.evaluator.callees import is_float
from hlo.evaluator.reductions import windowed
from hlo.ir import HloInstruction
from hlo.opcodes import Opcode
from hlo.shapes import array_shape


def _accumulator(out_dtype) -> np.dtype:
    dt = np.dtype(out_dtype)
    if is_float(dt) and dt.itemsize < 4:
        return np.dtype(np.float32)
    return dt


def _size(dims) -> int:
    return int(np.prod(dims, dtype=np.int64))


@eval_rule(Opcode.DOT)
def _dot(ev: Evaluator, inst: HloInstruction, vals: list[np.ndarray]):
    lhs, rhs = vals
    acc = _accumulator(array_shape(inst.shape).dtype.numpy)
    lb, lc = list(inst.attr("lhs_batch_dims", ())), list(inst.attr("lhs_contracting_dims", ()))
    rb, rc = list(inst.attr("rhs_batch_dims", ())), list(inst.attr("rhs_contracting_dims", ()))
    lf = [d for d in range(lhs.ndim) if d not in lb and d not in lc]
    rf = [d for d in range(rhs.ndim) if d not in rb and d not in rc]
    batch = [lhs.shape[d] for d in lb]
    lfree, rfree = [lhs.shape[d] for d in lf], [rhs.shape[d] for d in rf]
    k = _size([lhs.shape[d] for d in lc])
    a = np.transpose(lhs, lb + lf + lc).astype(acc).reshape(_size(batch), _size(lfree), k)
    b = np.transpose(rhs, rb + rc + rf).astype(acc).reshape(_size(batch), k, _size(rfree))
    return np.matmul(a, b).reshape(batch + lfree + rfree)


@eval_rule(Opcode.CONVOLUTION)
def _convolution(ev: Evaluator, inst: HloInstruction, vals: list[np.ndarray]):
    lhs, rhs = vals
    labels: ConvDimLabels = inst.attr("dim_labels") or ConvDimLabels.nhwc(lhs.ndim - 2)
    window = inst.attr("window")
    groups = inst.attr("feature_group_count", 1)
    batch_groups = inst.attr("batch_group_count", 1)
    acc = _accumulator(array_shape(inst.shape).dtype.numpy)
    x = np.transpose(lhs, (labels.input_batch, labels.input_feature) + labels.input_spatial).astype(acc)
    w = np.transpose(rhs, (labels.kernel_output_feature, labels.kernel_input_feature)
                     + labels.kernel_spatial).astype(acc)
    flips = tuple(2 + i for i, d in enumerate(window.dims) if d.reversal)
    if flips:
        w = np.flip(w, flips)
    n_sp = len(labels.input_spatial)
    batch, features = x.shape[:2]
    out_features, group_features = w.shape[:2]
    values, valid = windowed(x, window, leading=2)  # [B, C, out..., taps...]
    out_spatial = valid.shape[:n_sp]
    taps = _size(valid.shape[n_sp:])
    s = _size(out_spatial)
    patches = np.where(valid, values, np.zeros((), acc)).reshape(batch, features, s, taps)
    if batch_groups > 1:
        g, per_batch = batch_groups, batch // batch_groups
        if features != group_features:
            raise ValueError(f"kernel input features {group_features} != input features {features}")
        # [g, b, s, c, taps] with input batch index g * per_batch + b
        p = patches.reshape(g, per_batch, features, s, taps).transpose(0, 1, 3, 2, 4)
        out_batch = per_batch
    else:
        g = groups
        if features != g * group_features:
            raise ValueError(f"input features {features} != {g} groups x kernel input features {group_features}")
        p = patches.reshape(batch, g, group_features, s, taps).transpose(1, 0, 3, 2, 4)
        out_batch = batch
    if out_features % g:
        raise ValueError(f"kernel output features {out_features} are not divisible by {g} groups")
    per_out = out_features // g
    lhs_mat = p.reshape(g, out_batch * s, group_features * taps)
    rhs_mat = w.reshape(g, per_out, group_features * taps).transpose(0, 2, 1)
    r = np.matmul(lhs_mat, rhs_mat).reshape(g, out_batch, s, per_out).transpose(1, 0, 3, 2)
    r = r.reshape((out_batch, out_features) + out_spatial)  # [B, F, spatial...]
    src = [0] * (n_sp + 2)
    src[labels.output_batch], src[labels.output_feature] = 0, 1
    for i, d in enumerate(labels.output_spatial):
        src[d] = 2 + i
    return np.transpose(r, src)
