"""Shared by convolutions and pooling: TF data formats and TF's padding arithmetic.

``data_format`` names where the batch, feature and spatial dims sit
(``NHWC``/``NDHWC`` channels last, ``NCHW``/``NCDHW`` channels first).
Padding follows TF's ``GetWindowedOutputSizeVerbose`` exactly: for ``SAME``,
``out = ceil(in / stride)``, ``pad_total = max((out - 1) * stride + eff - in, 0)``
with ``eff = (k - 1) * dilation + 1``, and the extra odd element goes after
(``pad_before = pad_total // 2``); ``VALID`` pads nothing; ``EXPLICIT`` takes
``explicit_paddings`` (two ints per dim, in data-format order).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from hlo.attributes import WindowDim
from hlo.lowering.context import LoweringContext


@dataclass(frozen=True)
class Layout:
    """Positions of the batch, feature and spatial dims in an activation tensor."""

    batch: int
    feature: int
    spatial: tuple[int, ...]

    @property
    def rank(self) -> int:
        return len(self.spatial) + 2


def layout(ctx: LoweringContext, rank: int) -> Layout:
    """The layout named by the node's ``data_format`` for a tensor of ``rank`` (NHWC/NDHWC by default)."""
    fmt = ctx.attr_str("data_format") if ctx.has_attr("data_format") else None
    n = rank - 2
    if fmt is None or fmt in ("NHWC", "NDHWC") and len(fmt) == rank:
        return Layout(0, rank - 1, tuple(range(1, rank - 1)))
    if fmt in ("NCHW", "NCDHW") and len(fmt) == rank:
        return Layout(0, 1, tuple(range(2, rank)))
    raise ctx.error(f"data_format {fmt!r} is not supported for a rank-{rank} input with {n} spatial dim(s)")


def per_dim(ctx: LoweringContext, name: str, values: Sequence[int] | None, rank: int, default: int = 1) -> tuple[int, ...]:
    """An attribute with one entry per dim (strides, dilations, ksize), checked for length and sign."""
    if values is None or len(values) == 0:
        return (default,) * rank
    values = tuple(int(v) for v in values)
    if len(values) != rank:
        raise ctx.error(f"{name} must have {rank} entries, got {list(values)}")
    if any(v < 1 for v in values):
        raise ctx.error(f"{name} must be positive, got {list(values)}")
    return values


def paddings(ctx: LoweringContext, sizes: Sequence[int], ksizes: Sequence[int], strides: Sequence[int],
             dilations: Sequence[int] | None = None, dims: Sequence[int] | None = None) -> list[tuple[int, int]]:
    """(before, after) padding of each dim in ``dims`` (default: all), from the ``padding`` attribute.

    ``sizes``, ``ksizes``, ``strides``, ``dilations`` hold one entry per padded dim; ``dims`` are those
    dims' positions in data-format order (used to read ``explicit_paddings``). Raises where TF does:
    when its output size ``(n + pads - eff + stride) / stride``, divided with truncation, is negative.
    """
    dilations = dilations or [1] * len(sizes)
    dims = list(dims) if dims is not None else list(range(len(sizes)))
    mode = ctx.attr_str("padding")
    explicit = None
    if mode == "EXPLICIT":
        flat = list(ctx.attr_ints("explicit_paddings", ()))
        if len(flat) % 2 or len(flat) // 2 <= max(dims, default=0):
            raise ctx.error(f"explicit_paddings {flat} does not have two entries per dimension")
        if any(v < 0 for v in flat):
            raise ctx.error(f"explicit_paddings must be non-negative, got {flat}")
        explicit = [(flat[2 * d], flat[2 * d + 1]) for d in dims]
    elif mode not in ("SAME", "VALID"):
        raise ctx.error(f"padding {mode!r} is not supported")
    out = []
    for i, (n, k, s, d) in enumerate(zip(sizes, ksizes, strides, dilations)):
        eff = (k - 1) * d + 1
        if mode == "SAME":
            total = max((-(-n // s) - 1) * s + eff - n, 0)
            pad = (total // 2, total - total // 2)
        else:
            pad = explicit[i] if explicit is not None else (0, 0)
        num = n + pad[0] + pad[1] - eff + s  # TF divides with truncation: a window just missing gives size 0
        if (num // s if num >= 0 else -(-num // s)) < 0:
            raise ctx.error(f"computed output size would be negative: input size {n}, effective window size "
                            f"{eff}, stride {s}, padding {pad[0]}+{pad[1]}")
        out.append(pad)
    return out


def output_size(n: int, k: int, s: int, d: int, pad: tuple[int, int]) -> int:
    """The windowed output size of TF (and XLA) for one dim."""
    return max((n + pad[0] + pad[1] - ((k - 1) * d + 1)) // s + 1, 0)


def window_dim(k: int, s: int = 1, pad: tuple[int, int] = (0, 0), lhs_dilate: int = 1,
               rhs_dilate: int = 1) -> WindowDim:
    return WindowDim(size=k, stride=s, pad_low=pad[0], pad_high=pad[1], lhs_dilate=lhs_dilate, rhs_dilate=rhs_dilate)
