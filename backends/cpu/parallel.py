"""Parallel loops of the CPU kernels: which loops a nest splits, and how split loops run on the caller's
threads (kernel ABI 2, ``backends/README.md``).

A nest is split when its work (output elements times ``inner_work``) reaches the code generator's
``parallel_threshold``; ``parallel_loops`` picks the loops to collapse into tasks. A split loop is
outlined (``Outliner``): its body becomes a shard function
``static void <comp>_par<N>(void* ctx, int64_t begin, int64_t end)`` running tasks [begin, end), emitted
before the computation function, and the nest's place holds a context (``<comp>_par<N>_ctx``: the
function's ``p``, ``r``, ``scratch``, ``scratch_base``, ``tfxla_st``, and each local the body reads, by
value) and one call ``tfxla_parallel(n, <comp>_par<N>, &ctx_)`` (``PARALLEL_C``, in the prelude): through
the caller's ``parallel_for`` with every task in the caller's floating-point mode, or on the calling
thread (no runtime, one thread, one task). A shard re-declares the buffer pointers its body reads (their
declarations read only ``p``, ``r`` and ``scratch``), and decodes the loop indices of a task from its
number. A body reading a generated local the outliner cannot pass (one not declared through the
elemental emitter) is not outlined: the loops stay serial, never wrong.

One nest is one ``parallel_for`` call; tasks are contiguous. A reduction computing few elements is split
into a fixed number of parts (``reduction_parts``: from the sizes only, never the thread count), each a
partial from the reducer's identity (``REDUCTION_IDENTITY``), combined in order onto the initial value
after the call with the reducer itself: results do not depend on the number of threads.
"""

from __future__ import annotations

import math
import re
from typing import Callable, Sequence

from backends.codegen.buffer import IndentedBuffer, close_loops, open_loops
from hlo.ir import HloInstruction, HloModule
from hlo.opcodes import Opcode
from hlo.shapes import Shape

PARALLEL_CHUNKS = 64  # iterations the split loops of a parallel nest should offer the threads
REDUCTION_PARTS = 16  # parts of a split reduction (at most; fewer when its loops are small)
REDUCTION_PART_MIN = 2048  # iterations per part, at least

# The kernel side of the runtime (prelude): the caller's runtime, and running tasks on it.
PARALLEL_C = r"""
/* The caller's threads (kernel ABI 2): tfxla_run keeps its runtime here for the loops it runs. */
static __thread const tfxla_runtime* tfxla_rt;
#if defined(__SSE__)
#include <xmmintrin.h>
/* Every task runs in the calling thread's floating-point mode (MXCSR: flush-to-zero, denormals-are-zero,
   rounding), whatever the pool thread's is: TensorFlow sets FTZ/DAZ while it runs an op, Python does not. */
typedef struct { tfxla_task_fn fn; void* ctx; unsigned int mode; } tfxla_task;
static void tfxla_in_mode(void* task_, int64_t begin, int64_t end) {
  const tfxla_task* const task = (const tfxla_task*)task_;
  const unsigned int mine = _mm_getcsr();
  if ((mine & ~0x3fu) == task->mode) { task->fn(task->ctx, begin, end); return; }
  _mm_setcsr(task->mode | (mine & 0x3fu));
  task->fn(task->ctx, begin, end);
  _mm_setcsr(mine);
}
#endif
/* fn on tasks [0, n): through the caller's parallel_for, or on this thread (no runtime, one thread, one task). */
__attribute__((unused)) static void tfxla_parallel(int64_t n, tfxla_task_fn fn, void* ctx) {
  const tfxla_runtime* const rt = tfxla_rt;
  if (n < 2 || !rt || rt->struct_size < (int64_t)sizeof(tfxla_runtime) || rt->num_threads < 2 || !rt->parallel_for) {
    fn(ctx, 0, n);
    return;
  }
#if defined(__SSE__)
  tfxla_task task = {fn, ctx, _mm_getcsr() & ~0x3fu};
  rt->parallel_for(rt->pool, n, tfxla_in_mode, &task);
#else
  rt->parallel_for(rt->pool, n, fn, ctx);
#endif
}
"""


def parallel_loops(dims) -> tuple[int, int]:
    """Which loops of a nest over ``dims`` are split into tasks: (first, count), count 0 for none. Leading
    size-1 loops are skipped (a batch-1 NHWC tensor [1, 56, 56, 64] splits its H and W loops), then
    loops are collapsed until they run PARALLEL_CHUNKS iterations, never taking the innermost (the
    vector loop) unless it is the only one left."""
    first = next((d for d, n in enumerate(dims) if n > 1), None)
    if first is None:
        return 0, 0
    iterations, count = 1, 0
    for n in dims[first:max(len(dims) - 1, first + 1)]:
        iterations *= n
        count += 1
        if iterations >= PARALLEL_CHUNKS:
            break
    return first, count


# --- outlining -------------------------------------------------------------------------------------

_IDENT = re.compile(r"\b[A-Za-z_][A-Za-z_0-9]*\b")
_GENERATED = re.compile(r"\b([a-z]+)([0-9]+)\b(?!\s*\()")  # a ``Names.fresh`` name (b12, acc3, i7; not atan2())
_FRAME = (("void* const*", "p"), ("void* const*", "r"), ("char*", "scratch"), ("char*", "scratch_base"))


class Outliner:
    """The shard functions of one computation function (``fname``), in emission order.

    ``pointers`` maps each buffer pointer of the function to its declaration (``ComputationEmitter``)."""

    def __init__(self, fname: str, pointers: dict[str, str]):
        self.fname = fname
        self.pointers = pointers
        self.functions = IndentedBuffer()
        self.count = 0

    def mark(self) -> tuple[int, int]:
        return self.count, len(self.functions._lines)

    def rollback(self, mark: tuple[int, int]) -> None:
        """Forget the shards outlined since ``mark()`` (an emission that was abandoned)."""
        self.count = mark[0]
        del self.functions._lines[mark[1]:]

    def captures(self, text: str, declared: dict[str, str], mark: int, own: set[str]) -> dict[str, str] | None:
        """The locals ``text`` reads from the function around it (name -> C type, first use first): those
        generated before ``mark`` (the names counter when the body began), neither buffer pointers nor
        ``own`` (declared by the shard); None when one of them is not in ``declared`` or is an array (a
        local array is declared with its pointer type, ``T*``: the shard reads it through the pointer, valid
        while the call runs)."""
        out: dict[str, str] = {}
        for m in _GENERATED.finditer(text):
            name = m.group(0)
            if int(m.group(2)) > mark or name in own or name in self.pointers or name in out:
                continue
            ctype = declared.get(name)
            if ctype is None or "[" in ctype:
                return None
            out[name] = ctype
        return out

    def call(self, out: IndentedBuffer, n: int, body: IndentedBuffer, captures: dict[str, str],
             part: tuple[str, int] | None = None, serial: bool = False) -> str:
        """Outline ``body`` (statements running tasks ``begin_`` to ``end_``; ``c_`` is the context) as a
        shard, and write into ``out`` its context ``ctx_`` and the call running its ``n`` tasks; ``part``:
        (C type, count) of the context's ``part`` array the body fills. ``serial``: a nest outlined only to
        keep the computation function small (``emit_nest``): ``<fname>_seq<N>``, never inlined, called
        directly on this thread. Returns the shard's name."""
        name = f"{self.fname}_{'seq' if serial else 'par'}{self.count}"
        self.count += 1
        text = body.getvalue()
        fns = self.functions
        with fns.block("typedef struct", close=f"}} {name}_ctx;"):
            for ctype, field in _FRAME:
                fns.line(f"{ctype} {field};")
            fns.line("tfxla_state* st;")
            for var, ctype in captures.items():
                fns.line(f"{ctype} {var};")
            if part is not None:
                fns.line(f"{part[0]} part[{part[1]}];")
        attribute = "__attribute__((noinline)) " if serial else ""
        with fns.block(f"{attribute}static void {name}(void* ctx_, int64_t begin_, int64_t end_)"):
            fns.line(f"{name}_ctx* const c_ = ({name}_ctx*)ctx_;")
            for ctype, field in _FRAME:
                fns.line(f"{ctype} const {field} = c_->{field};")
            fns.line("(void)p; (void)r; (void)scratch; (void)scratch_base;")
            if "tfxla_st" in text:
                fns.line("tfxla_state* const tfxla_st = c_->st;")
            used = set(_IDENT.findall(text))
            for ptr, decl in self.pointers.items():
                if ptr in used:
                    fns.line(decl)
            for var, ctype in captures.items():
                fns.line(f"const {ctype} {var} = c_->{var};")
            fns.splice(body)
        fns.line("")
        fields = ["p", "r", "scratch", "scratch_base", "tfxla_st", *captures]
        out.line(f"{name}_ctx ctx_ = {{{', '.join(fields)}}};")
        out.line(f"{name}(&ctx_, 0, {n});" if serial else f"tfxla_parallel({n}, {name}, &ctx_);")
        return name


def decode(buf: IndentedBuffer, flat: str, loops: Sequence[tuple[str, int]]) -> None:
    """Declare the index variable of each of ``loops`` ((var, size), outermost first) from ``flat``, the
    number of an iteration of all of them (row-major)."""
    stride, outer = math.prod(n for _, n in loops), 1
    for var, n in loops:
        stride //= n
        if n == 1:
            expr = "0"
        else:
            expr = flat if stride == 1 else f"{flat} / {stride}"
            expr = f"{expr} % {n}" if outer > 1 else expr
        outer *= n
        buf.line(f"const int64_t {var} = {expr};")


def _task_loops(buf: IndentedBuffer, loops: Sequence[tuple[str, int]], lo: str, hi: str) -> None:
    """Open the loop over iterations [lo, hi) of ``loops`` collapsed (closed by one ``close_loops``):
    the innermost variable itself when every other one has size 1, else a flat index decoded."""
    if all(n == 1 for _, n in loops[:-1]):
        for var, _ in loops[:-1]:
            buf.line(f"const int64_t {var} = 0;")
        var = loops[-1][0]
        buf.line(f"for (int64_t {var} = {lo}; {var} < {hi}; ++{var}) {{")
        buf._level += 1
        return
    buf.line(f"for (int64_t f_ = {lo}; f_ < {hi}; ++f_) {{")
    buf._level += 1
    decode(buf, "f_", loops)


def emit_nest(out: IndentedBuffer, outliner: Outliner, loops: Sequence[tuple[str, int]], split: int,
              body: IndentedBuffer, declared: dict[str, str], mark: int, outline: bool = False) -> None:
    """The loop nest ``loops`` ((var, size), outermost first) around ``body``: its first ``split`` loops run
    as tasks through ``tfxla_parallel`` (``split`` 0: all serial; serial too when the body reads a local
    the shard cannot receive). ``mark``: the names counter when the body began (``Outliner.captures``).
    ``outline``: a serial nest too becomes a function of its own (``Outliner.call(serial=True)``): gcc's
    register allocation and global CSE/PRE grow faster than linearly with a function's size, and one
    function holding every nest of a large model was most of its compile (DenseNet121 96x96: gcc 22 CPU-s,
    15 with its nests outlined)."""
    serial = outline and not split and bool(loops)  # a scalar (no loop) stays inline: nothing to outline
    wanted = split or serial
    captures = outliner.captures(body.getvalue(), declared, mark, {v for v, _ in loops}) if wanted else None
    if captures is None:
        open_loops(out, loops)
        out.splice(body)
        close_loops(out, len(loops))
        return
    split = split or 1
    shard = IndentedBuffer()
    _task_loops(shard, loops[:split], "begin_", "end_")
    open_loops(shard, loops[split:])
    shard.splice(body)
    close_loops(shard, len(loops) - split + 1)
    with out.block(""):
        outliner.call(out, math.prod(n for _, n in loops[:split]), shard, captures, serial=serial)


def reduction_parts(sizes: Sequence[int]) -> tuple[int, int, int]:
    """How a reduction over loops of ``sizes`` (outermost first) is cut: (m, parts, s). Either the first m
    loops (never the innermost) collapsed run ``parts`` ranges, s = 1; or, when the outer loops offer too
    few iterations, all of them (m = len - 1) are decoded from the part's number / s and the innermost loop
    is cut into s ranges: parts = (their iterations) * s."""
    target = max(2, min(REDUCTION_PARTS, math.prod(sizes) // REDUCTION_PART_MIN))
    q, m = 1, 0
    while m < len(sizes) - 1 and q < target:
        q *= sizes[m]
        m += 1
    if q >= target:
        return m, target, 1
    s = min(sizes[-1], target // q)
    return m, q * s, s


def emit_split_reduction(out: IndentedBuffer, outliner: Outliner, loops: Sequence[tuple[str, int]], body: IndentedBuffer,
                         simd: str | None, acc: str, ctype: str, identity: str, declared: dict[str, str], mark: int,
                         combine: Callable[[str], None]) -> bool:
    """The reduction loops ``loops`` around ``body`` (which updates ``acc``) cut into parts
    (``reduction_parts``) that run as tasks, each accumulating from ``identity`` into ``part[t]``; after the
    call ``combine(part)`` is written in order for each part's C expression. ``simd``: the line before the
    innermost loop. False (nothing written) when the body reads a local the shard cannot receive."""
    captures = outliner.captures(body.getvalue(), declared, mark, {v for v, _ in loops} | {acc})
    if captures is None:
        return False
    m, parts, s = reduction_parts([n for _, n in loops])
    shard = IndentedBuffer()
    with shard.block("for (int64_t t_ = begin_; t_ < end_; ++t_)"):
        shard.line(f"{ctype} {acc} = {identity};")
        if s == 1:
            q = math.prod(n for _, n in loops[:m])
            _task_loops(shard, loops[:m], f"t_ * {q} / {parts}", f"(t_ + 1) * {q} / {parts}")
            open_loops(shard, loops[m:-1])
            if simd:
                shard.line(simd)
            open_loops(shard, loops[-1:])
            shard.splice(body)
            close_loops(shard, len(loops) - m + 1)
        else:  # parts = q * s: the outer loops' iteration t_ / s, the innermost loop's range t_ % s
            decode(shard, f"t_ / {s}", loops[:-1])
            var, n = loops[-1]
            chunk = "t_" if parts == s else f"(t_ % {s})"
            if simd:
                shard.line(simd)
            with shard.block(f"for (int64_t {var} = {chunk} * {n} / {s}; {var} < ({chunk} + 1) * {n} / {s}; ++{var})"):
                shard.splice(body)
        shard.line(f"c_->part[t_] = {acc};")
    with out.block(""):
        outliner.call(out, parts, shard, captures, (ctype, parts))
        with out.block(f"for (int64_t t_ = 0; t_ < {parts}; ++t_)"):
            combine("ctx_.part[t_]")
    return True


# --- how much work -----------------------------------------------------------------------------------

def inner_work(module: HloModule, inst: HloInstruction, computed: frozenset[str] = frozenset()) -> int:
    """Rough work per output element: the largest reduction/contraction/window size inside ``inst``, but
    for the instructions ``computed`` before its loop (column reductions streamed into arrays)."""
    insts = (module.computation(inst.attr("calls").name).instructions if inst.opcode is Opcode.FUSION
             else (inst,))
    work = 1
    for i in insts:
        if i.name in computed:
            continue
        if i.opcode is Opcode.REDUCE:
            src = module_shape(module, inst, i, 0)
            work = max(work, math.prod(src.dims[d] for d in i.attr("dimensions")) if src else 1)
        elif i.opcode is Opcode.DOT:
            src = module_shape(module, inst, i, 0)
            work = max(work, math.prod(src.dims[d] for d in i.attr("lhs_contracting_dims", ())) if src else 1)
        elif i.opcode in (Opcode.CONVOLUTION, Opcode.REDUCE_WINDOW):
            work = max(work, math.prod(d.size for d in i.attr("window").dims) * 16)
    return work


def module_shape(module: HloModule, outer: HloInstruction, inst: HloInstruction, k: int):
    comp = module.computation(outer.attr("calls").name) if outer.opcode is Opcode.FUSION else None
    if comp is not None and inst.operands[k] in comp.by_name:
        shape = comp[inst.operands[k]].shape
        return shape if isinstance(shape, Shape) else None
    return None
