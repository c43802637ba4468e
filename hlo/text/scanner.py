"""A character scanner for HLO text with line:column error reporting.

The parser and the attribute codecs read through one ``Scanner``; every
failure is an ``HloParseError`` carrying the position and what was expected.
Whitespace and ``//`` / ``/* */`` comments are skipped between tokens.
"""

from __future__ import annotations

import re

from hlo.errors import HloParseError
from hlo.shapes import INT64_MAX, INT64_MIN

NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
DIGITS = frozenset("0123456789")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "'": "'", "0": "\0"}


class Scanner:
    def __init__(self, text: str):
        self.text = text
        self.pos = 0

    # --- positions and errors ------------------------------------------------
    def line_col(self, pos: int | None = None) -> tuple[int, int]:
        pos = self.pos if pos is None else pos
        line = self.text.count("\n", 0, pos) + 1
        col = pos - (self.text.rfind("\n", 0, pos) + 1) + 1
        return line, col

    def error(self, expected: str, pos: int | None = None) -> HloParseError:
        pos = self.pos if pos is None else pos
        line, col = self.line_col(pos)
        got = self.text[pos:pos + 20].split("\n")[0]
        got = repr(got) if got else "end of input"
        return HloParseError(f"expected {expected}, got {got}", line, col)

    # --- low level -----------------------------------------------------------
    def skip_ws(self) -> None:
        text, n = self.text, len(self.text)
        while self.pos < n:
            c = text[self.pos]
            if c in " \t\r\n":
                self.pos += 1
            elif text.startswith("//", self.pos):
                end = text.find("\n", self.pos)
                self.pos = n if end < 0 else end + 1
            elif text.startswith("/*", self.pos):
                end = text.find("*/", self.pos + 2)
                if end < 0:
                    raise self.error("end of comment '*/'")
                self.pos = end + 2
            else:
                break

    def at_end(self) -> bool:
        self.skip_ws()
        return self.pos >= len(self.text)

    def peek(self, n: int = 1) -> str:
        self.skip_ws()
        return self.text[self.pos:self.pos + n]

    def mark(self) -> int:
        """Skip whitespace and return the position of the next token (for error reports)."""
        self.skip_ws()
        return self.pos

    def peek_raw(self) -> str:
        """The next character without skipping whitespace."""
        return self.text[self.pos:self.pos + 1]

    def accept(self, token: str) -> bool:
        self.skip_ws()
        if self.text.startswith(token, self.pos):
            self.pos += len(token)
            return True
        return False

    def accept_word(self, word: str) -> bool:
        """Accept ``word`` only if it is not the prefix of a longer name."""
        self.skip_ws()
        end = self.pos + len(word)
        if self.text.startswith(word, self.pos) and (end >= len(self.text) or self.text[end] not in NAME_CHARS):
            self.pos = end
            return True
        return False

    def expect(self, token: str, what: str | None = None) -> None:
        if not self.accept(token):
            raise self.error(what or repr(token))

    # --- tokens --------------------------------------------------------------
    def name(self, what: str = "a name") -> str:
        """A name such as ``add.3`` or ``%Max-reduction.3`` (the ``%`` is dropped)."""
        self.skip_ws()
        if self.peek_raw() == "%":
            self.pos += 1
        start = self.pos
        text, n = self.text, len(self.text)
        while self.pos < n and text[self.pos] in NAME_CHARS:
            self.pos += 1
        if self.pos == start:
            raise self.error(what)
        return text[start:self.pos]

    def word(self, what: str = "an identifier") -> str:
        """A bare word (letters, digits, ``_``, ``-``, ``.``), no ``%``."""
        self.skip_ws()
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] in NAME_CHARS:
            self.pos += 1
        if self.pos == start:
            raise self.error(what)
        return self.text[start:self.pos]

    def chars(self, allowed: frozenset[str] | str, what: str) -> str:
        """The longest run of ``allowed`` characters (at least one)."""
        self.skip_ws()
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] in allowed:
            self.pos += 1
        if self.pos == start:
            raise self.error(what)
        return self.text[start:self.pos]

    def integer(self, what: str = "an integer") -> int:
        """A decimal int64 (ASCII digits only: ``str.isdigit`` also accepts superscripts)."""
        self.skip_ws()
        start = self.pos
        if self.peek_raw() in ("+", "-"):
            self.pos += 1
        digits = self.pos
        while self.pos < len(self.text) and self.text[self.pos] in DIGITS:
            self.pos += 1
        if self.pos == digits:
            self.pos = start
            raise self.error(what)
        value = int(self.text[start:self.pos])
        if not INT64_MIN <= value <= INT64_MAX:
            raise self.error(f"{what} that fits in int64", start)
        return value

    def boolean(self) -> bool:
        if self.accept_word("true"):
            return True
        if self.accept_word("false"):
            return False
        raise self.error("true or false")

    def string(self) -> str:
        """A double-quoted string with C escapes."""
        self.skip_ws()
        start = self.pos
        if self.peek_raw() != '"':
            raise self.error("a quoted string")
        self.pos += 1
        out: list[str] = []
        text, n = self.text, len(self.text)
        while True:
            if self.pos >= n:
                raise self.error("closing '\"' of string", start)
            c = text[self.pos]
            if c == '"':
                self.pos += 1
                return "".join(out)
            if c == "\\":
                if self.pos + 1 >= n:
                    raise self.error("escape sequence")
                e = text[self.pos + 1]
                if e == "x" and self.pos + 3 < n:
                    try:
                        out.append(chr(int(text[self.pos + 2:self.pos + 4], 16)))
                    except ValueError:
                        raise self.error("hex escape") from None
                    self.pos += 4
                    continue
                out.append(_ESCAPES.get(e, e))
                self.pos += 2
                continue
            out.append(c)
            self.pos += 1

    def balanced(self) -> str:
        """Raw text of one value: a ``{...}``/``(...)``/``[...]`` group, a string, or a bare word."""
        self.skip_ws()
        start = self.pos
        text, n = self.text, len(self.text)
        if self.pos < n and text[self.pos] == '"':
            self.string()
            return text[start:self.pos]
        if self.pos < n and text[self.pos] in "{([":
            closers = {"{": "}", "(": ")", "[": "]"}
            stack: list[str] = []
            while self.pos < n:
                c = text[self.pos]
                if c == '"':
                    self.string()
                    continue
                if c in closers:
                    stack.append(closers[c])
                elif c in "})]":
                    if not stack or stack.pop() != c:
                        raise self.error("balanced brackets")
                    if not stack:
                        self.pos += 1
                        return text[start:self.pos]
                self.pos += 1
            raise self.error("closing bracket", start)
        while self.pos < n and text[self.pos] not in " \t\r\n,)}":
            self.pos += 1
        if self.pos == start:
            raise self.error("an attribute value")
        return text[start:self.pos]


_NEEDS_ESCAPE = re.compile(r'[\x00-\x1f"\\]')


def quote(text: str) -> str:
    """Quote a string the way XLA's printer does (C escapes)."""
    if _NEEDS_ESCAPE.search(text) is None:  # the usual op name or path: nothing to escape
        return '"' + text + '"'
    out = []
    for c in text:
        if c in ('"', "\\"):
            out.append("\\" + c)
        elif c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        elif ord(c) < 32:
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'
