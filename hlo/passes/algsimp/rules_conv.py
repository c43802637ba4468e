"""Convolution: an explicit zero pad of the input folded into the window's padding.

Keras pads the input of a strided depthwise layer explicitly (MobileNetV2's ``ZeroPadding2D`` before a
VALID convolution), so the pad sits between the expansion layer's epilogue and the convolution: after
fusion it is a loop of its own (or the tail of the previous layer's fusion, which then cannot be a
oneDNN post-op chain). Moving it into the window lets the backends compute the padding where the
convolution reads (oneDNN's asymmetric ``pad_l``/``pad_r``) and the previous epilogue fuse into its
convolution.

Exactness: the evaluator fills window padding with +0 and multiplies it like any tap, which is what the
explicit pad of +0 gives, so the rule holds bit for bit. It fires only for a pad value that is +0
bitwise (a -0 pad would make -0 * w taps), pads of the spatial dims that are non-negative with no
interior padding, and no lhs (base) dilation on those dims (padding a dilated input is not padding
the input).
"""

from __future__ import annotations

from dataclasses import replace

from hlo.attributes import ConvDimLabels, PadDim, Window
from hlo.ir import HloInstruction
from hlo.opcodes import Opcode
from hlo.passes.algsimp.context import Replacement, RewriteContext, rule


@rule(Opcode.CONVOLUTION)
def convolution_of_zero_pad(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """convolution(pad(x, +0), w) with spatial, non-negative, non-interior padding -> convolution(x, w) whose
    window pads by the sum."""
    pad = ctx.operand(inst, 0)
    if pad.opcode is not Opcode.PAD or not ctx.has_value(ctx.operand(pad, 1), 0):
        return None
    padding: tuple[PadDim, ...] = pad.attr("padding")
    labels: ConvDimLabels = inst.attr("dim_labels") or ConvDimLabels.nhwc(len(padding) - 2)  # the evaluator's default
    window: Window | None = inst.attr("window")
    if window is None or len(window.dims) != len(labels.input_spatial):
        return None
    if any(padding[d] != PadDim(0, 0, 0) for d in (labels.input_batch, labels.input_feature)):
        return None
    dims = list(window.dims)
    for i, d in enumerate(labels.input_spatial):
        p = padding[d]
        if p.interior != 0 or p.low < 0 or p.high < 0 or (dims[i].lhs_dilate != 1 and p != PadDim(0, 0, 0)):
            return None
        dims[i] = replace(dims[i], pad_low=dims[i].pad_low + p.low, pad_high=dims[i].pad_high + p.high)
    attrs = [(k, Window(tuple(dims)) if k == "window" else v) for k, v in inst.attrs.items() if k != "metadata"]
    return ctx.new(Opcode.CONVOLUTION, inst.shape, [pad.operands[0], inst.operands[1]], attrs)
