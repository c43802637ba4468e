"""Which oneDNN convolution primitive computes an HLO ``convolution``: its form, read from the HLO alone.

Gradients reach the backend as plain HLO convolutions (built as tf2xla and
``hlo/lowering/ops/conv.py`` build them), and a forward oneDNN convolution
over them has only oneDNN's reference implementation (a weight gradient is a
"convolution" whose window is the output's whole spatial size: ~100x slower
than the library's gradient kernels). So every convolution is first given a
FORM, recognised structurally (dim_labels, window, dilations, group counts;
never TF op names), and each form plans its own primitive. ``FORMS`` is tried
in order; the first whose ``matches`` holds plans it (``None``: the elemental
rules emit it).

With HLO's ``out[b, f, p] = sum_{i, k} lhs[b, i, p*stride + k*rhs_dilate - pad_low] * rhs[i, f, k]``
(``lhs`` dilated by ``lhs_dilate`` first):

* ``backward_weights`` (``convolution_backward_weights``): no lhs dilation or reversal, and either
  ``batch_group_count > 1`` (a grouped/depthwise filter gradient) or an lhs whose FEATURE dim is
  outermost in memory (``dim_labels=f01b_i01o->01bf``: the activation with batch and feature
  swapped; a forward reading would hand oneDNN a minibatch innermost in memory, which only its
  reference kernel takes): a filter gradient, whose kernel is the output gradient. Read as
  ``dW[o, c, k] = sum_{n, q} x[n, c, q*S + k*D - pad_l] * dy[n, o, q]``: ``x`` is lhs (n = its
  feature dim, c = its batch dim), ``dy`` is rhs (n = its input feature, o = its output feature,
  q = its spatial dims), ``dW`` the result; the gradient's stride S is HLO's ``rhs_dilate``, its
  dilation D HLO's window stride. Trailing input rows no tap reads give a negative ``pad_r`` (down
  to ``1 - S``, oneDNN's limit; more are cut off the view). The diff weights go through oneDNN's
  preferred layout and one reorder.
* ``backward_data`` (``convolution_backward_data``): lhs dilation (a strided input gradient) or
  window reversal, window stride 1. Read as ``dx[n, c, h] = sum_{o, k} dy[n, o, q] * w[o, c, k]``
  with ``h = q*S + k*D - pad_l``: ``dy`` is lhs, ``dx`` the result, ``S = lhs_dilate``,
  ``pad_l = (K-1)*D - pad_low``; ``w`` is the rhs spatially flipped (HLO's rhs is the reversed
  filter, ``reverse`` being its own instruction): a small per-call loop writes the flip
  into scratch (``ConvPlan.flip``), dims with ``rhs_reversal`` set or of size 1 excepted.
* ``forward`` (``convolution_forward``): the rest with no lhs dilation, reversal, negative padding or
  batch groups; grouped/depthwise weights ``[G, O/G, I/G, ...]``.

Every view is a plain strided oneDNN memory descriptor over the HLO buffer (no copies). Backward
primitives take no post-ops: an output fusion around one runs its whole epilogue in the elemental
loop (``takes_post_ops``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from backends.cpu.dnnl import ConvWindow, Tensor
from hlo.ir import HloInstruction
from hlo.opcodes import Opcode
from hlo.shapes import Shape


@dataclass(frozen=True)
class Operand:
    """An operand or result buffer of the convolution: its shape, C pointer and C constant array (if any)."""

    shape: Shape
    ptr: str
    const: str | None = None


@dataclass(frozen=True)
class ConvPlan:
    """A oneDNN convolution: which primitive (``prop``), its three tensors in oneDNN's roles
    (``src``/``wei``/``dst``: the read, read and written slots of ``DnnlPrimitive``), its window,
    and the rhs dims to flip into scratch before each call (``flip``: buffer dims of the rhs, whose
    flipped copy ``wei`` then describes; empty: none)."""

    prop: str
    src: Tensor
    wei: Tensor
    dst: Tensor
    window: ConvWindow
    flip: tuple[int, ...] = ()


def _minor_to_major(shape: Shape) -> tuple[int, ...]:
    """The dims of ``shape`` from innermost to outermost in memory (its layout; row-major if none)."""
    return shape.layout.minor_to_major if shape.layout is not None and shape.layout.minor_to_major \
        else tuple(range(shape.rank - 1, -1, -1))


def strides_of(shape: Shape) -> list[int]:
    """Element strides of every dim of a dense buffer of ``shape`` (its layout; row-major if none)."""
    strides, step = [0] * shape.rank, 1
    for d in _minor_to_major(shape):
        strides[d] = step
        step *= shape.dims[d]
    return strides


def _view(op: Operand, dims: list[int], sizes: list[int] | None = None) -> Tensor:
    """``op`` seen with logical dim k = its buffer dim ``dims[k]`` (sizes overridable, e.g. cut views)."""
    st = strides_of(op.shape)
    return Tensor(tuple(sizes if sizes is not None else [op.shape.dims[d] for d in dims]),
                  tuple(st[d] for d in dims), op.shape.dtype, op.ptr, op.const)


def _weights(op: Operand, groups: int, o: int, i: int, spatial: list[int], split: int) -> Tensor:
    """Weights ``[O, I, spatial...]`` from buffer dims ``o``, ``i`` and ``spatial``; with ``groups > 1``,
    ``[G, O/G, I/G, spatial...]``, the group index splitting buffer dim ``split`` (``o`` or ``i``)."""
    if groups == 1:
        return _view(op, [o, i] + spatial)
    st, dims = strides_of(op.shape), op.shape.dims
    per = dims[split] // groups
    return Tensor((groups,) + tuple(per if d == split else dims[d] for d in [o, i] + spatial),
                  (per * st[split],) + tuple(st[d] for d in [o, i] + spatial), op.shape.dtype, op.ptr, op.const)


def _window(inst: HloInstruction):
    return inst.attr("window").dims


# --- the forms ----------------------------------------------------------------------------------

def _is_backward_data(inst: HloInstruction, lhs: Shape) -> bool:
    return any(d.lhs_dilate != 1 or d.reversal for d in _window(inst))


def _plan_backward_data(inst: HloInstruction, lhs: Operand, rhs: Operand, out: Operand) -> ConvPlan | None:
    dl, window, groups = inst.attr("dim_labels"), _window(inst), inst.attr("feature_group_count", 1)
    if inst.attr("batch_group_count", 1) != 1 or any(d.stride != 1 for d in window):
        return None
    ext = [(d.size - 1) * d.rhs_dilate + 1 for d in window]
    pad_l = [e - 1 - d.pad_low for e, d in zip(ext, window)]
    pad_r = [e - 1 - d.pad_high for e, d in zip(ext, window)]
    # pad_l within [0, ext): what oneDNN's kernels take; pad_r > -stride: oneDNN's size check (the sizes
    # then agree exactly: HLO's result size is (q-1)*S + 1 + pad_low + pad_high - ext + 1).
    if any(not 0 <= p < e for p, e in zip(pad_l, ext)) or \
            any(not -d.lhs_dilate < p < e for p, e, d in zip(pad_r, ext, window)):
        return None
    sp = list(dl.kernel_spatial)
    flip = tuple(d for d, w in zip(sp, window) if not w.reversal and rhs.shape.dims[d] > 1)
    # oneDNN's [G, OC/G, IC/G, k]: OC (diff_dst's channels) is the rhs input feature, IC the output feature.
    wei = _weights(rhs, groups, dl.kernel_input_feature, dl.kernel_output_feature, sp, dl.kernel_output_feature)
    if flip:  # the flipped copy in scratch: no C array behind it
        wei = Tensor(wei.dims, wei.strides, wei.dtype, wei.ptr)
    src = _view(lhs, [dl.input_batch, dl.input_feature] + list(dl.input_spatial))
    dst = _view(out, [dl.output_batch, dl.output_feature] + list(dl.output_spatial))
    win = ConvWindow(tuple(d.lhs_dilate for d in window), tuple(d.rhs_dilate - 1 for d in window),
                     tuple(pad_l), tuple(pad_r))
    return ConvPlan("backward_data", src, wei, dst, win, flip)


def _is_backward_weights(inst: HloInstruction, lhs: Shape) -> bool:
    if any(d.lhs_dilate != 1 or d.reversal for d in _window(inst)):
        return False
    if inst.attr("batch_group_count", 1) != 1:
        return True
    # A forward reading gives oneDNN the lhs batch dim as its minibatch, which its kernels want outermost
    # in memory: when the lhs feature dim is outermost instead (dim_labels=f01b_...: the lhs is an
    # activation, its batch read as the feature), the weight-gradient reading is the one that fits.
    dl = inst.attr("dim_labels")
    return inst.attr("feature_group_count", 1) == 1 and _minor_to_major(lhs)[-1] == dl.input_feature


def _plan_backward_weights(inst: HloInstruction, lhs: Operand, rhs: Operand, out: Operand) -> ConvPlan | None:
    dl, window = inst.attr("dim_labels"), _window(inst)
    groups = inst.attr("batch_group_count", 1)
    if inst.attr("feature_group_count", 1) != 1:
        return None
    ks = [out.shape.dims[d] for d in dl.output_spatial]  # the gradient's kernel
    sizes = [lhs.shape.dims[d] for d in dl.input_spatial]
    pad_l, pad_r, cut = [], [], []
    for d, k, size in zip(window, ks, sizes):
        ext = (k - 1) * d.stride + 1  # the kernel's extent: the window stride is the gradient's dilation
        need = (d.size - 1) * d.rhs_dilate + ext - size - d.pad_low  # right padding the last tap reads
        if not 0 <= d.pad_low < ext or need >= ext:
            return None
        pad_l.append(d.pad_low)
        # oneDNN's size check wants pad_r > -stride; rows past the last tap beyond that are cut off the view
        # (a view oneDNN may only have its reference kernel for: HLO from TF never needs it).
        pad_r.append(max(need, 1 - d.rhs_dilate))
        cut.append(size + min(need + d.rhs_dilate - 1, 0))
    src = _view(lhs, [dl.input_feature, dl.input_batch] + list(dl.input_spatial),
                sizes=[lhs.shape.dims[dl.input_feature], lhs.shape.dims[dl.input_batch]] + cut)
    diff_dst = _view(rhs, [dl.kernel_input_feature, dl.kernel_output_feature] + list(dl.kernel_spatial))
    diff_w = _weights(out, groups, dl.output_feature, dl.output_batch, list(dl.output_spatial), dl.output_feature)
    win = ConvWindow(tuple(d.rhs_dilate for d in window), tuple(d.stride - 1 for d in window),
                     tuple(pad_l), tuple(pad_r))
    return ConvPlan("backward_weights", src, diff_dst, diff_w, win)


def _is_forward(inst: HloInstruction, lhs: Shape) -> bool:
    return inst.attr("batch_group_count", 1) == 1 and \
        all(d.lhs_dilate == 1 and not d.reversal and d.pad_low >= 0 and d.pad_high >= 0 for d in _window(inst))


def _plan_forward(inst: HloInstruction, lhs: Operand, rhs: Operand, out: Operand) -> ConvPlan | None:
    dl, window, groups = inst.attr("dim_labels"), _window(inst), inst.attr("feature_group_count", 1)
    src = _view(lhs, [dl.input_batch, dl.input_feature] + list(dl.input_spatial))
    dst = _view(out, [dl.output_batch, dl.output_feature] + list(dl.output_spatial))
    wei = _weights(rhs, groups, dl.kernel_output_feature, dl.kernel_input_feature, list(dl.kernel_spatial),
                   dl.kernel_output_feature)
    win = ConvWindow(tuple(d.stride for d in window), tuple(d.rhs_dilate - 1 for d in window),
                     tuple(d.pad_low for d in window), tuple(d.pad_high for d in window))
    return ConvPlan("forward", src, wei, dst, win)


@dataclass(frozen=True)
class Form:
    name: str  # the oneDNN propagation kind
    matches: Callable[[HloInstruction, Shape], bool]  # (the convolution, its lhs's shape)
    plan: Callable[[HloInstruction, Operand, Operand, Operand], ConvPlan | None]


FORMS = (
    Form("backward_data", _is_backward_data, _plan_backward_data),
    Form("backward_weights", _is_backward_weights, _plan_backward_weights),
    Form("forward", _is_forward, _plan_forward),
)


def form_of(inst: HloInstruction, lhs: Shape) -> Form | None:
    """The form of convolution ``inst`` whose lhs has shape ``lhs`` (None: none; the elemental rules emit it)."""
    dl = inst.attr("dim_labels")
    if dl is None or not isinstance(lhs, Shape) or not 1 <= len(_window(inst)) <= 3:
        return None
    return next((f for f in FORMS if f.matches(inst, lhs)), None)


def plan(inst: HloInstruction, lhs: Operand, rhs: Operand, out: Operand) -> ConvPlan | None:
    """The oneDNN primitive computing convolution ``inst`` over these buffers, or None."""
    form = form_of(inst, lhs.shape)
    if form is None or (form.name != "forward" and out.shape.dtype != lhs.shape.dtype):
        return None  # (oneDNN's gradients have no bf16 -> f32 forms: the forward hint is unimplemented)
    return form.plan(inst, lhs, rhs, out)


def takes_post_ops(inst: HloInstruction, lhs: Shape) -> bool:
    """Whether oneDNN may fuse an epilogue into ``inst`` (a dot, or a convolution of the forward form;
    ``lhs``: the shape of its lhs)."""
    if inst.opcode is not Opcode.CONVOLUTION:
        return True
    form = form_of(inst, lhs)
    return form is None or form.name == "forward"
