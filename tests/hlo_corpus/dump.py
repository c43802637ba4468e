"""Dump the HLO corpus to a directory.

Usage::

    python -m tests.hlo_corpus.dump OUTDIR [CASE_NAME ...]

Writes ``OUTDIR/<name>.hlo.txt`` and ``OUTDIR/<name>.optimized_hlo.txt`` for
every case (or only the named ones) and ``OUTDIR/SUMMARY.txt`` listing, across
all dumped modules, every HLO opcode and every instruction attribute key
(``key=`` after the operand list) with counts and two example lines per key,
plus module-header attribute keys and a few notable syntax features.
"""

from __future__ import annotations

import collections
import os
import re
import sys
import time
from typing import Iterable, Optional

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# --------------------------------------------------------------------------
# A tiny, forgiving scanner for HLO instruction lines (summary purposes only).
# --------------------------------------------------------------------------

_INSTR_START = re.compile(r"^\s*(ROOT\s+)?%?([A-Za-z0-9_.\-]+)\s*=\s*")
_OPCODE = re.compile(r"([a-z][a-z0-9\-]*)\(")
_KEY = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_.\-]*)=")
_OPEN = {"(": ")", "{": "}", "[": "]"}


def _match_bracket(s: str, i: int) -> int:
    """Index just past the bracket group opening at s[i]; quote aware."""
    stack = []
    n = len(s)
    while i < n:
        ch = s[i]
        if ch == '"':
            i += 1
            while i < n and s[i] != '"':
                i += 2 if s[i] == "\\" else 1
        elif ch == "/" and s.startswith("/*", i):
            j = s.find("*/", i + 2)
            i = n - 1 if j < 0 else j + 1
        elif ch in _OPEN:
            stack.append(_OPEN[ch])
        elif ch in ")}]":
            if stack and stack[-1] == ch:
                stack.pop()
                if not stack:
                    return i + 1
        i += 1
    return n


def _split_top_level(s: str) -> list[str]:
    """Split on commas not nested in brackets or quotes."""
    parts, depth, cur, i, n = [], 0, [], 0, len(s)
    while i < n:
        ch = s[i]
        if ch == '"':
            j = i + 1
            while j < n and s[j] != '"':
                j += 2 if s[j] == "\\" else 1
            cur.append(s[i : j + 1])
            i = j + 1
            continue
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
        i += 1
    if "".join(cur).strip():
        parts.append("".join(cur))
    return parts


def parse_instruction(line: str) -> Optional[tuple[str, str, list[str]]]:
    """Return (shape, opcode, [attribute keys]) for an instruction line, else None."""
    m = _INSTR_START.match(line)
    if not m:
        return None
    i = m.end()
    # shape: a parenthesised tuple shape, or a run of non-space characters
    if line.startswith("(", i):
        j = _match_bracket(line, i)
    else:
        j = i
        while j < len(line) and not line[j].isspace():
            j += 1
    shape = line[i:j]
    rest = line[j:].lstrip()
    om = _OPCODE.match(rest)
    if not om:
        return None
    opcode = om.group(1)
    end = _match_bracket(rest, om.end() - 1)
    keys = []
    for part in _split_top_level(rest[end:]):
        km = _KEY.match(part)
        if km:
            keys.append(km.group(1))
    return shape, opcode, keys


def parse_module_header(line: str) -> list[str]:
    """Attribute keys on an ``HloModule name, k=v, ...`` line."""
    if not line.startswith("HloModule"):
        return []
    keys = []
    for part in _split_top_level(line[len("HloModule") :])[1:]:
        km = _KEY.match(part)
        if km:
            keys.append(km.group(1))
    return keys


# Syntax features worth knowing about when writing a parser.
_NOTABLE = {
    "elided constant {...}": re.compile(r"\{\.\.\.\}"),
    "nan literal": re.compile(r"(?<![A-Za-z_])-?nan(\([^)]*\))?(?![A-Za-z_0-9])"),
    "inf literal": re.compile(r"(?<![A-Za-z_])-?inf(?![A-Za-z_0-9])"),
    "layout with ':' extras": re.compile(r"\]\{[0-9,]*:[^}]*\}"),
    "/*index=N*/ comment": re.compile(r"/\*index=\d+\*/"),
    "other /*...*/ comment": re.compile(r"/\*(?!index=)[^*]*\*/"),
    "operand without inline shape (optimized form)": re.compile(r"[a-z\-]+\(%[A-Za-z]"),
    "dynamic dimension <=N": re.compile(r"<=\d+"),
    "array constant literal constant({...})": re.compile(r"constant\(\{"),
    "e-notation float literal": re.compile(r"constant\(-?\d+(\.\d+)?e[+-]?\d+\)"),
    "computation param list with tuple type": re.compile(r"^%\S+ \(.*: \(.*\)\) ->"),
    "backend_config JSON": re.compile(r"backend_config=\{\""),
    "backend_config string": re.compile(r'backend_config="'),
}


def summarize(modules: dict[str, str]) -> str:
    """Summary text for ``{file_name: hlo_text}``."""
    opcode_counts = collections.Counter()
    opcode_by_stage: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    opcode_files: dict[str, list[str]] = collections.defaultdict(list)
    key_counts = collections.Counter()
    key_examples: dict[str, list[str]] = collections.defaultdict(list)
    key_opcodes: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    header_keys = collections.Counter()
    header_examples: dict[str, str] = {}
    notable = collections.Counter()
    notable_examples: dict[str, list[str]] = collections.defaultdict(list)
    unparsed: list[str] = []
    n_instr = 0

    for fname, text in sorted(modules.items()):
        stage = "optimized_hlo" if fname.endswith(".optimized_hlo.txt") else "hlo"
        for line in text.splitlines():
            s = line.strip()
            if not s:
                continue
            for k in parse_module_header(s):
                header_keys[k] += 1
                header_examples.setdefault(k, s)
            for label, rx in _NOTABLE.items():
                if rx.search(line):
                    notable[label] += 1
                    if len(notable_examples[label]) < 2:
                        notable_examples[label].append(f"{fname}: {s}")
            parsed = parse_instruction(line)
            if parsed is None:
                if not (s.startswith("HloModule") or s.endswith("{") or s == "}"):
                    unparsed.append(f"{fname}: {s}")
                continue
            n_instr += 1
            _, opcode, keys = parsed
            opcode_counts[opcode] += 1
            opcode_by_stage[stage][opcode] += 1
            base = fname.rsplit(".", 2)[0] if stage == "hlo" else fname[: -len(".optimized_hlo.txt")]
            if base not in opcode_files[opcode]:
                opcode_files[opcode].append(base)
            for k in keys:
                key_counts[k] += 1
                key_opcodes[k][opcode] += 1
                if len(key_examples[k]) < 2:
                    key_examples[k].append(f"{fname}: {s}")

    out = []
    out.append(f"modules: {len(modules)}   instructions: {n_instr}")
    out.append("")
    out.append(f"== opcodes ({len(opcode_counts)}) ==  total  [hlo / optimized_hlo]  cases (first 6)")
    for op, c in sorted(opcode_counts.items(), key=lambda kv: (-kv[1], kv[0])):
        files = opcode_files[op]
        more = f" (+{len(files) - 6})" if len(files) > 6 else ""
        out.append(
            f"{op:28s} {c:6d}  [{opcode_by_stage['hlo'][op]} / {opcode_by_stage['optimized_hlo'][op]}]"
            f"  {', '.join(files[:6])}{more}"
        )
    out.append("")
    out.append(f"== instruction attribute keys ({len(key_counts)}) ==  total  opcodes")
    for k, c in sorted(key_counts.items(), key=lambda kv: (-kv[1], kv[0])):
        ops = ", ".join(f"{o}:{n}" for o, n in key_opcodes[k].most_common())
        out.append(f"{k:28s} {c:6d}  {ops}")
    out.append("")
    out.append(f"== module header attribute keys ({len(header_keys)}) ==")
    for k, c in sorted(header_keys.items(), key=lambda kv: (-kv[1], kv[0])):
        out.append(f"{k:28s} {c:6d}  e.g. {header_examples[k]}")
    out.append("")
    out.append("== notable syntax (line counts) ==")
    for label in _NOTABLE:
        out.append(f"{label:50s} {notable[label]:6d}")
    out.append("")
    out.append("== example lines per instruction attribute key ==")
    for k in sorted(key_counts):
        out.append(f"-- {k}")
        for ex in key_examples[k]:
            out.append(f"   {ex}")
    out.append("")
    out.append("== example lines per notable syntax feature ==")
    for label in _NOTABLE:
        if notable_examples[label]:
            out.append(f"-- {label}")
            for ex in notable_examples[label]:
                out.append(f"   {ex}")
    out.append("")
    out.append(f"== lines not recognised as instructions/headers ({len(unparsed)}) ==")
    out.extend(f"   {u}" for u in unparsed[:50])
    return "\n".join(out) + "\n"


def dump(outdir: str, names: Optional[Iterable[str]] = None, verbose: bool = True) -> dict:
    """Write the corpus under ``outdir``; returns {"seconds": ..., "failures": [...]}."""
    from .cases import CASES, CASES_BY_NAME
    from .generate import STAGES, hlo_text

    cases = CASES if not names else [CASES_BY_NAME[n] for n in names]
    os.makedirs(outdir, exist_ok=True)
    modules: dict[str, str] = {}
    failures = []
    t0 = time.perf_counter()
    for case in cases:
        t = time.perf_counter()
        for stage in STAGES:
            fname = f"{case.name}.{stage}.txt"
            try:
                text = hlo_text(case, stage)
            except Exception as e:  # report and continue
                failures.append((case.name, stage, f"{type(e).__name__}: {e}"))
                continue
            modules[fname] = text
            with open(os.path.join(outdir, fname), "w") as f:
                f.write(text)
        if verbose:
            print(f"{case.name:36s} {time.perf_counter() - t:6.2f}s", file=sys.stderr)
    seconds = time.perf_counter() - t0
    summary = summarize(modules)
    header = f"cases: {len(cases)}  generation time: {seconds:.1f}s  failures: {len(failures)}\n"
    for name, stage, err in failures:
        header += f"FAILED {name} [{stage}]: {err.splitlines()[0] if err else ''}\n"
    with open(os.path.join(outdir, "SUMMARY.txt"), "w") as f:
        f.write(header + summary)
    return {"seconds": seconds, "failures": failures}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    outdir, names = argv[0], argv[1:]
    res = dump(outdir, names)
    print(
        f"wrote {outdir} in {res['seconds']:.1f}s; failures: {len(res['failures'])}",
        file=sys.stderr,
    )
    for name, stage, err in res["failures"]:
        print(f"FAILED {name} [{stage}]: {err}", file=sys.stderr)
    return 1 if res["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
