"""An indented text buffer for generated code (in the spirit of TorchInductor's IndentedBuffer), C loop
nests and C comments."""

from __future__ import annotations

import contextlib
from typing import Iterator


class IndentedBuffer:
    def __init__(self, indent: str = "  "):
        self._lines: list[str] = []
        self._level = 0
        self._indent = indent

    def line(self, text: str = "") -> None:
        for part in text.split("\n") if text else [""]:
            self._lines.append((self._indent * self._level + part) if part else "")

    def lines(self, texts) -> None:
        for t in texts:
            self.line(t)

    @contextlib.contextmanager
    def indent(self, n: int = 1) -> Iterator[None]:
        self._level += n
        try:
            yield
        finally:
            self._level -= n

    @contextlib.contextmanager
    def block(self, header: str, close: str = "}") -> Iterator[None]:
        """``header {`` ... ``}``."""
        self.line(header + " {")
        with self.indent():
            yield
        self.line(close)

    @contextlib.contextmanager
    def capture(self) -> Iterator["IndentedBuffer"]:
        """Lines written to this buffer inside the block go to the buffer yielded instead, from its level 0
        (whoever writes here: an emitter and the emitters it created share one buffer)."""
        inner = IndentedBuffer(self._indent)
        saved = self._lines, self._level
        self._lines, self._level = inner._lines, 0
        try:
            yield inner
        finally:
            self._lines, self._level = saved

    def splice(self, other: "IndentedBuffer") -> None:
        """Append ``other``'s lines at this buffer's current indentation."""
        for text in other._lines:
            self._lines.append(self._indent * self._level + text if text else "")

    def getvalue(self) -> str:
        return "\n".join(self._lines) + "\n"


def open_loops(buf: IndentedBuffer, bounds, pragmas: dict[int, str] | None = None) -> None:
    """Open ``for (int64_t v = 0; v < n; ++v) {`` for each (variable, bound) in ``bounds``, outermost
    first; ``pragmas[k]`` is written before loop ``k``. ``close_loops`` closes them."""
    for k, (var, n) in enumerate(bounds):
        if pragmas and k in pragmas:
            buf.line(pragmas[k])
        buf.line(f"for (int64_t {var} = 0; {var} < {n}; ++{var}) {{")
        buf._level += 1


def close_loops(buf: IndentedBuffer, count: int) -> None:
    for _ in range(count):
        buf._level -= 1
        buf.line("}")


def c_comment(text: str, break_open: bool = True) -> str:
    """``text`` as a C comment: a ``*/`` inside is broken up, and a ``/*`` too unless ``break_open`` is
    False (a nested ``/*`` is legal C, but ``-Wcomment -Werror`` refuses it: CUDA builds with that;
    the C kernels keep theirs, as in tuple shapes' ``/*index=5*/``, so their sources stay as they were)."""
    if break_open:
        text = text.replace("/*", "/ *")
    return "/* " + text.replace("*/", "* /") + " */"
