"""One computation as a C function, and the table of top-level kernels.

Every computation that runs at the top level (the ENTRY, while bodies and
conditions, conditional branches, called computations) becomes
``static int comp_N(void* const* p, void* const* r, char* scratch, char* err, size_t errlen)``:
``p`` holds the leaf buffers of its parameters, ``r`` the leaf buffers its
result is written to. Its instructions are emitted in order (text order is
the schedule): parameters, constants, tuples and get-tuple-element are
buffer aliases; opcodes with a top-level kernel (``TOP_LEVEL``: while,
conditional, sort, scatter, ...) emit it; everything else, fusions included,
becomes one loop nest over its output whose body the elemental emitter
writes. The serial kernels every backend shares (``backends.codegen.serial.SERIAL``: sort, topk,
scatter, select-and-scatter) are top-level kernels here too; ``ComputationEmitter`` is their
``SerialEmitter``. Each computation owns a fixed region of the scratch arena.

A loop nest with enough work runs its outer loops on the caller's threads (``parallel.py``): they are
outlined into shard functions (``<fname>_par<N>``), written before the function; so is the reduction of
a nest computing few elements (``split_reduction``). In a computation of ``OUTLINE_NESTS_FROM``
instructions or more, a serial nest is outlined as well (``<fname>_seq<N>``, called directly): gcc's
cost grows faster than linearly with a function's size.
"""

from __future__ import annotations

from typing import Callable, Union

from backends.codegen import values as V
from backends.codegen.buffer import IndentedBuffer, c_comment
from backends.codegen.buffer_assignment import can_write_in_place, element_last_uses, in_place_update
from backends.codegen.computation import ComputationEmitterBase
from backends.codegen.elemental import ElementalEmitter, SplitReduction
from backends.codegen.errors import CodegenUnsupported
from backends.codegen.layout import linear_index
from backends.codegen.names import Names
from backends.codegen.registry import registrar
from backends.codegen.serial import SERIAL
from backends.codegen.values import Buf
from backends.cpu.column_reduce import column_members, column_reduce
from backends.cpu.concat_parts import emit_concat_parts
from backends.cpu.dialect import C
from backends.cpu.dynamic_update import emit_in_place_update, emit_slice_copy
from backends.cpu.index_check import emit_index_checks, emit_scatter_check
from backends.cpu.row_program import emit_row_group, row_groups
from backends.cpu.parallel import Outliner, emit_nest, emit_split_reduction, inner_work, parallel_loops
from hlo.dtypes import PrimitiveType
from hlo.ir import HloComputation, HloInstruction
from hlo.opcodes import Opcode
from hlo.shapes import Shape, ShapeLike, TupleShape

leaves = V.leaves


Value = Union[Buf, tuple]  # a Buf or a (nested) tuple of values


def check_array(shape: ShapeLike, what: str) -> Shape:
    return V.check_array(shape, what, C.storage)


OUTLINE_NESTS_FROM = 200  # instructions of a computation from which every loop nest is outlined


class ComputationEmitter(ComputationEmitterBase):
    """Emits one computation as a C function (see the module docstring)."""

    def __init__(self, gen, comp: HloComputation, fname: str):
        super().__init__(gen, comp)
        self.fname = fname
        self.buf = IndentedBuffer()
        self.decls = IndentedBuffer()  # buffer pointers, hoisted to the top of the function
        self.pointers: dict[str, str] = {}  # buffer pointer -> its declaration (the shards repeat theirs)
        self.outliner = Outliner(fname, self.pointers)
        # a large computation's serial nests become functions of their own too (``emit_nest``'s outline)
        self.outline_nests = len(comp.instructions) >= OUTLINE_NESTS_FROM
        self._labels: dict[str, str] = {}  # buffer pointer -> its arena label (buffers in the arena)
        self._element_last: dict[tuple[str, int], int] | None = None

    @property
    def scratch_bytes(self) -> int:
        return self.arena.size

    @property
    def offsets(self) -> dict[str, int]:
        return {a.label: a.offset for a in self.arena.allocations}

    @property
    def names(self) -> Names:
        return self.gen.names

    # --- buffers -----------------------------------------------------------------------
    def declare(self, shape: Shape, expr: str) -> Buf:
        """A local pointer variable for a buffer. Pointers are always locals: GCC 12 miscompiles
        vectorized loops with conditional loads through pointers reloaded from an array (p[0])."""
        name = self.names.fresh("b")
        self.pointer(name, C.storage(shape.dtype), f"({expr})")
        return Buf(name, shape)

    def pointer(self, name: str, ctype: str, expr: str) -> None:
        """Declare buffer pointer ``name`` at the top of the function; ``expr`` (a primary expression) reads
        only ``p``, ``r`` and ``scratch`` (a shard function declares it again the same way)."""
        line = f"{ctype}* const {name} = ({ctype}*){expr};"
        self.decls.line(line)
        self.pointers[name] = line

    def alloc(self, shape: Shape, label: str, temp: bool = True) -> Buf:
        """A scratch buffer; ``temp`` ones are freed after the current instruction, values when they die."""
        offset = self.arena.allocate(label, shape.byte_size, self.step)
        if temp:
            self._temps.append(label)
        buf = self.declare(shape, f"scratch + {offset}")
        self._labels[buf.ptr] = label
        return buf

    def alloc_value(self, shape: ShapeLike, label: str) -> Value:
        if isinstance(shape, Shape) and shape.dtype is PrimitiveType.TOKEN:
            return ()  # a token has no data: it is an empty value
        if isinstance(shape, TupleShape):
            return tuple(self.alloc_value(s, f"{label}#{k}") for k, s in enumerate(shape.elements))
        return self.alloc(check_array(shape, f"%{label}"), label, temp=False)

    def alloc_bytes(self, nbytes: int, label: str) -> str:
        offset = self.arena.allocate(label, nbytes, self.step)
        self._temps.append(label)
        return f"(scratch + {offset})"

    def _target(self, inst: HloInstruction) -> Value:
        """The buffers of ``inst``'s result: in place of a dying operand where legal, else fresh."""
        if inst.opcode is Opcode.WHILE:
            state = self._while_state(inst)
            if state is not None:
                return state
        if isinstance(inst.shape, Shape) and inst.shape.dtype.is_array_type:
            for op in inst.operands:
                if (op in self.arena.live and self.last_use.get(op) == self.step
                        and can_write_in_place(self.gen.module, self.comp, inst, op)):
                    offset = self.arena.share(inst.name, op, self.step)
                    self._owned[inst.name] = [inst.name]
                    if in_place_update(self.gen.module, inst) is not None:  # the operand's pointer itself
                        buf = V.view(self.values[op], inst.shape)
                    else:
                        buf = self.declare(inst.shape, f"scratch + {offset}")
                    self._labels[buf.ptr] = inst.name
                    return buf
        before = set(self.arena.live)
        value = self.alloc_value(inst.shape, inst.name)
        self._owned[inst.name] = [k for k in self.arena.live if k not in before]
        return value

    def _while_state(self, inst: HloInstruction) -> Value | None:
        """A while's state (a flat tuple of arrays): each element whose initial value is a buffer dying at
        the while (held once in the initial tuple) is that buffer, so it is not copied; None (fresh buffers
        for all, the default) when there is none."""
        shape, init = inst.shape, self.value(inst.operands[0])
        if not isinstance(shape, TupleShape) or not isinstance(init, tuple) or len(init) != len(shape.elements):
            return None
        dying = self._dying_labels()
        ptrs = [b.ptr if isinstance(b, Buf) else None for b in init]
        take = [isinstance(b, Buf) and b.shape == s and ptrs.count(b.ptr) == 1 and self._labels.get(b.ptr) in dying
                and self._labels[b.ptr] in self.arena.live for b, s in zip(init, shape.elements)]
        if not any(take):
            return None
        value, owned = [], []
        for k, (b, s, mine) in enumerate(zip(init, shape.elements, take)):
            label = f"{inst.name}#{k}"
            if mine:
                self.arena.share(label, self._labels[b.ptr], self.step)
                self._labels[b.ptr] = label
                value.append(b)
                owned.append(label)
            else:
                before = set(self.arena.live)
                value.append(self.alloc_value(s, label))
                owned += [name for name in self.arena.live if name not in before]
        self._owned[inst.name] = owned
        return tuple(value)

    def _dying_labels(self) -> set[str]:
        """The arena labels of buffers no instruction after the current one reads: those of values
        dying here, and the elements of tuple values whose own last reader this is
        (``element_last_uses``)."""
        if self._element_last is None:
            self._element_last = element_last_uses(self.comp)
        dying = {label for owner in self._dying.get(self.step, ()) for label in self._owned.get(owner, ())}
        for owner, labels in self._owned.items():
            shape = self.comp[owner].shape
            if isinstance(shape, TupleShape) and len(labels) == len(shape.elements):
                dying.update(label for k, label in enumerate(labels)
                             if self._element_last.get((owner, k)) == self.step)
        return dying

    def reader(self, name: str) -> Callable:
        """A function from an index to the element of instruction ``name`` (arrays and tuples of arrays)."""
        inst = self.comp[name]
        if inst.opcode is Opcode.CONSTANT:
            return lambda idx, inst=inst: self.gen.constant_element(inst, idx)
        return _value_reader(self.values[name])

    def gen_tmp(self, ctype: str, expr: str) -> str:
        """A named constant local in the current block."""
        name = self.names.fresh("t")
        self.buf.line(f"const {ctype} {name} = {expr};")
        return name

    def emit_copy(self, dst: Buf, src: Buf) -> None:
        if dst.ptr != src.ptr and dst.shape.num_elements:
            self.buf.line(f"memcpy({dst.ptr}, {src.ptr}, {dst.shape.byte_size});")

    def emit_copy_unless_same(self, dst: Buf, src: Buf) -> None:
        """A copy skipped at run time when ``dst`` is ``src`` (buffers that may be one: a while's state)."""
        if dst.ptr != src.ptr and dst.shape.num_elements:
            self.buf.line(f"if ((const void*){dst.ptr} != (const void*){src.ptr}) "
                          f"memcpy({dst.ptr}, {src.ptr}, {dst.shape.byte_size});")

    def emit_scatter_check(self, inst: HloInstruction, operand: Shape, indices: Shape, updates: Shape,
                           read: Callable) -> None:
        emit_scatter_check(self.buf, self.names, inst, operand, indices, updates, read)

    # --- the function --------------------------------------------------------------------
    def emit(self, result_leaves: list[str]) -> None:
        comp = self.comp
        root = comp.root
        out = iter(result_leaves)
        result = V.rebuild(root.shape, lambda s: self.declare(check_array(s, "buffer"), next(out)))
        direct = V.direct_results(root, result)
        pos = 0
        for p in comp.parameters:
            n = len(list(p.shape.leaves()))
            ptrs = iter([f"p[{pos + k}]" for k in range(n)])
            self.values[p.name] = V.rebuild(p.shape, lambda s: self.declare(check_array(s, "buffer"), next(ptrs)))
            pos += n
        groups = {m.name: g for g in row_groups(comp) for m in g}
        group_start = 0
        for step, inst in enumerate(comp.instructions):
            self.step = step
            group = groups.get(inst.name)
            if group is not None and inst is group[0] and not self.row_group_fits(group, direct):
                for m in group:
                    del groups[m.name]
                group = None
            if group is None:
                self.emit_instruction(inst, direct.get(inst.name))
                self.release_dead(step)
                continue
            # A row program member (row_program.py): only values used outside the group get a buffer;
            # buffers are released once the group's loop is emitted (it reads them all).
            group_start = step if inst is group[0] else group_start
            if inst.name in direct:
                self.values[inst.name] = direct[inst.name]
            elif self._escapes(inst, group):
                before = set(self.arena.live)
                self.values[inst.name] = self.alloc_value(inst.shape, inst.name)
                self._owned[inst.name] = [k for k in self.arena.live if k not in before]
            if inst is group[-1]:
                self.emit_row_group(group)
                for s in range(group_start, step + 1):
                    self.release_dead(s)
        # Results not written in place are copied (a while body's aliased state only if its caller
        # passed a result buffer of its own: ``loop_state_aliases``).
        final = self.values.get(root.name)
        if final is None:
            final = self.gen.constant_value(root)
        aliased = self.gen.loop_aliases(comp.name)
        for k, (src, dst) in enumerate(zip(leaves(final), leaves(result))):
            if k in aliased:
                self.emit_copy_unless_same(dst, src)
            else:
                self.emit_copy(dst, src)

    def _escapes(self, inst: HloInstruction, group: list[HloInstruction]) -> bool:
        """Whether a row program member is used outside its group (so it needs a buffer)."""
        names = {m.name for m in group}
        return inst is self.comp.root or any(u not in names for u in self.comp.users().get(inst.name, []))

    def row_group_fits(self, group: list[HloInstruction], direct: dict) -> bool:
        """Whether ``group`` can be one loop over rows (``row_program.py``), tried with stand-in buffers
        before any is allocated: if not, its members are emitted as if it were not annotated."""
        saved_values = dict(self.values)
        for k, inst in enumerate(group):
            if inst.name in direct or self._escapes(inst, group):
                self.values[inst.name] = Buf(f"out{k}_", inst.shape) if isinstance(inst.shape, Shape) else ()
        saved, self.buf = self.buf, IndentedBuffer()
        mark, shards = self.names.counter, self.outliner.mark()
        try:
            emit_row_group(self, group)
            return True
        except CodegenUnsupported:
            return False
        finally:
            self.buf, self.values = saved, saved_values
            self.names.counter = mark
            self.outliner.rollback(shards)

    def emit_row_group(self, group: list[HloInstruction]) -> None:
        """A row program as one loop over rows (``row_group_fits`` said it can be); if it still cannot be
        one, its members one by one."""
        trial = IndentedBuffer()
        saved, self.buf = self.buf, trial
        mark, shards = self.names.counter, self.outliner.mark()
        try:
            emit_row_group(self, group)
            self.buf = saved
            self.buf.splice(trial)
            return
        except CodegenUnsupported:
            self.buf = saved
            self.names.counter = mark
            self.outliner.rollback(shards)
        last = self.step
        for inst in group:
            self.step = self.comp.instructions.index(inst)
            self.emit_instruction(inst, self.values.get(inst.name))
        self.step = last

    def emit_instruction(self, inst: HloInstruction, out: Value | None) -> None:
        if self.emit_alias(inst, out):
            return
        op = inst.opcode
        target = out if out is not None else self._target(inst)
        self.values[inst.name] = target
        self.buf.line(c_comment(f"%{inst.name} = {inst.shape} {op.text}", break_open=False))
        kernel = TOP_LEVEL.get(op) or SERIAL.get(op)
        if kernel is not None and kernel(self, inst, target) is not False:  # False: declined, emit the default
            return
        try:
            trial = IndentedBuffer()
            saved, self.buf = self.buf, trial
            mark, shards = self.names.counter, self.outliner.mark()
            self.emit_loop(inst, target)
        except CodegenUnsupported:
            self.buf = saved
            if op is not Opcode.FUSION:
                raise
            self.names.counter = mark
            self.outliner.rollback(shards)
            self.emit_call(inst.attr("calls").name, [self.value(o) for o in inst.operands], target)
            return
        self.buf = saved
        self.buf.splice(trial)

    # --- loops -----------------------------------------------------------------------
    def emit_loop(self, inst: HloInstruction, target: Value) -> None:
        outs = leaves(target)
        dims = outs[0].shape.dims
        if any(o.shape.dims != dims for o in outs):
            raise CodegenUnsupported(f"%{inst.name}: tuple results of different dims in one loop")
        buf = self.buf
        readers = [self.reader(o) for o in inst.operands]
        checked = emit_index_checks(buf, self.names, self.gen.module, self.comp, inst, readers)
        if 0 in dims:
            return
        if len(outs) == 1 and emit_in_place_update(self, inst, outs[0], readers, checked):
            return
        if len(outs) == 1 and emit_slice_copy(self, inst, outs[0], readers, checked):
            return
        if len(outs) == 1 and emit_concat_parts(self, inst, outs[0], readers, checked):
            return
        if inst.opcode is Opcode.FUSION:
            fused = self.gen.module.computation(inst.attr("calls").name)
            emitter = ElementalEmitter(C, self.gen.module, fused, readers, buf, self.names, self.gen.constant_ref)
            root = fused.root_name
        else:
            emitter = ElementalEmitter(C, self.gen.module, self.comp, [], buf, self.names, self.gen.constant_ref,
                                       external=dict(zip(inst.operands, readers)))
            root = inst.name
        emitter.index_checked = checked
        idx = tuple(self.names.fresh("i") for _ in dims)
        with buf.block(""):
            threshold = self.gen.options.parallel_threshold
            streamed = column_members(emitter, buf, self.names, self.outliner, threshold)
            if len(outs) == 1 and column_reduce(emitter, emitter.comp[root], outs[0], buf, self.names,
                                                self.outliner, threshold):
                return
            inner = inner_work(self.gen.module, inst, streamed)
            work = outs[0].shape.num_elements * inner
            first, count = parallel_loops(dims) if work >= self.gen.options.parallel_threshold else (0, 0)
            if count == 0 and outs[0].shape.num_elements <= 4 and inner >= self.gen.options.parallel_threshold:
                # Too few output elements to split: split the reduction itself (full/row reductions).
                emitter.parallel_reduce = self.split_reduction
                emitter.declared.update((i, "int64_t") for i in idx)  # read by the shard
            mark = self.names.counter
            with buf.capture() as body:
                value = emitter.emit(root, idx)
                values = value if isinstance(value, tuple) else (value,)
                if len(values) != len(outs):
                    raise CodegenUnsupported(f"%{inst.name}: nested tuple results in one loop")
                for o, v in zip(outs, values):
                    buf.line(f"{o.ptr}[{linear_index(o.shape, idx)}] = {C.store(o.shape.dtype, v)};")
            emit_nest(buf, self.outliner, list(zip(idx, dims)), first + count if count else 0, body,
                      emitter.declared, mark, outline=self.outline_nests)

    def split_reduction(self, em: ElementalEmitter, red: SplitReduction) -> bool:
        """The ``ReductionSplitter`` of this function's nests: ``red`` in parts on the caller's threads."""
        identity = C.reduction_identity(red.op, red.ctype)
        if identity is None:
            return False

        def combine(part: str) -> None:
            em.buf.line(f"{red.acc} = {em.call_scalar(red.reducer, [red.acc, part])};")

        return emit_split_reduction(em.buf, self.outliner, red.bounds, red.body, red.simd, red.acc, red.ctype,
                                    identity, em.declared, red.mark, combine)

    # --- calls into other computations ------------------------------------------------
    def emit_call(self, comp_name: str, args: list[Value], target: Value) -> None:
        fname = self.gen.function_for(comp_name)
        arg_leaves = [b.ptr for a in args for b in leaves(a)]
        out_leaves = [b.ptr for b in leaves(target)]
        with self.buf.block(""):
            self.buf.line(f"void* const cp[] = {{{', '.join(f'(void*){a}' for a in arg_leaves) or '0'}}};")
            self.buf.line(f"void* const cr[] = {{{', '.join(f'(void*){a}' for a in out_leaves) or '0'}}};")
            self.buf.line(f"const int call_status = {fname}(cp, cr, scratch_base + TFXLA_BASE_{fname}, err, errlen);")
            self.buf.line("if (call_status) return call_status;")

    def function_text(self) -> str:
        """The shard functions of the parallel loops, then the function."""
        out = IndentedBuffer()
        out.splice(self.outliner.functions)
        with out.block(f"static int {self.fname}(void* const* p, void* const* r, char* scratch, char* err, "
                       f"size_t errlen)"):
            out.line("(void)p; (void)r; (void)scratch; (void)err; (void)errlen;")
            out.line("char* const scratch_base = tfxla_scratch_base;")
            out.line("(void)scratch_base;")
            out.splice(self.decls)
            out.splice(self.buf)
            out.line("return 0;")
        return out.getvalue()


def buf_reader(buf: Buf) -> Callable:
    """A function from an index to ``buf``'s element there, in compute type."""
    return lambda idx: C.load(buf.shape.dtype, buf.at(idx))


def _value_reader(value: Value) -> Callable:
    if isinstance(value, Buf):
        return buf_reader(value)
    readers = [_value_reader(v) for v in value]
    return lambda idx: tuple(r(idx) for r in readers)


# A kernel may return False, before emitting anything, to decline: the default loop nest (or call) is emitted.
TopLevelKernel = Callable[[ComputationEmitter, HloInstruction, Value], "bool | None"]
TOP_LEVEL: dict[Opcode, TopLevelKernel] = {}
top_level = registrar(TOP_LEVEL)
