"""oneDNN for the CPU backend: finding the library, and emitting its primitives into generated C.

Discovery: oneDNN 3.x built with its TBB runtime (PyPI ``onednn-cpu-tbb`` +
``onednn-devel-cpu-tbb``, with ``tbb`` and the Intel compiler runtime ``intel-cmplr-lib-rt``
that library needs: ``INSTALL``) puts ``libdnnl.so`` in ``<prefix>/lib`` and
``oneapi/dnnl/dnnl.h`` in ``<prefix>/include``; ``installation()`` looks under
``$TFXLA_DNNL_ROOT``, ``sys.prefix`` (a venv) and ``sys.base_prefix``. When it is absent, dot
and convolution use the elemental loops and one warning goes to the ``tfxla_plugin`` logger;
nothing here raises. Why TBB (docs/design.md §7): an OpenMP build gives every thread that calls
it a team of its own, which multiplies threads under TF's executor; TBB keeps one process-wide
pool. An install with another CPU runtime still works, with one warning. ``libdnnl.so`` finds
``libtbb``/``libimf`` in its own directory only through the kernel's rpath (``DT_RPATH``: the
kernel is linked with ``--disable-new-dtags``, ``backends/toolchain.py``).

Emission (``DnnlPrimitive.emit``; the module's headers, helpers and stream: ``dnnl_module.py``): every
primitive is built ONCE by a static
``tfxla_dnnl_init_N`` called from ``tfxla_init`` (memory descriptors, post-ops,
primitive descriptor, primitive, memory objects, constant weights reordered
into the layout oneDNN prefers); the computation function only points the
memory objects at this call's buffers (``dnnl_memory_set_data_handle``) and
executes. Invariants: all handles live in ``tfxla_state`` (NULL until created,
destroyed by ``tfxla_teardown`` whatever point init reached); the CPU engine is
one per shared object; concurrent calls on one state are safe: the oneDNN work of
a state (re-pointing the shared memory objects, executing, weight reorders
into the state's buffer when a parameter's weights changed) runs under a mutex in the state.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import math
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from backends.codegen.buffer import IndentedBuffer
from backends.cpu.dialect import C
from backends.cpu.dnnl_module import LIBRARIES, module_state  # noqa: F401  (LIBRARIES: re-exported)
from backends.cpu import dnnl_weights
from hlo.dtypes import PrimitiveType as P

log = logging.getLogger("tfxla_plugin")

DNNL_TYPES = {P.F32: "dnnl_f32", P.BF16: "dnnl_bf16", P.F16: "dnnl_f16"}
MAX_POST_OPS = 16  # the size of po_md in tfxla_dnnl_init_N
# Convolution weights that are a parameter, of at least this many elements, are given to oneDNN in their
# own layout (no per-call reorder) when it picks the same implementation for them as for its preferred one.
PLAIN_CONV_WEIGHTS_MIN = 65536
# What to install: the TBB-runtime build, TBB itself, and the Intel compiler runtime libdnnl.so links
# (libimf, libintlc; the wheel does not declare it). pyproject.toml lists the same.
INSTALL = ("pip install onednn-cpu-tbb==2023.2.0 onednn-devel-cpu-tbb==2023.2.0 tbb==2021.13.1 "
           "intel-cmplr-lib-rt==2023.2.4")
# DNNL_CPU_RUNTIME in dnnl_config.h -> its name
_RUNTIMES = {0: "none", 1: "sequential", 2: "omp", 4: "tbb", 8: "threadpool"}
# Libraries the TBB build of libdnnl.so needs from its own directory, loaded first by ``load_library``.
_DEPENDENCIES = ("libintlc.so.5", "libimf.so", "libtbb.so.12")
_ISA_NEEDED = {P.F32: 0x0, P.BF16: 0xE7, P.F16: 0x1EF}  # dnnl_cpu_isa_avx512_core_bf16 / _fp16 bits


# --- discovery ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class DnnlInstall:
    include_dir: str
    lib_dir: str
    library: str  # for -l: "dnnl" or ":libdnnl.so.3"
    version: tuple[int, int, int]
    runtime: str = "tbb"  # its CPU threading runtime (dnnl_config.h): "tbb", "omp", "sequential", ...


def _roots() -> list[str]:
    roots = [os.environ.get("TFXLA_DNNL_ROOT", ""), sys.prefix, sys.base_prefix]
    return list(dict.fromkeys(r for r in roots if r))


def find_install(roots: Sequence[str | os.PathLike] | None = None) -> DnnlInstall | None:
    """The first oneDNN 3.x install (header + shared library) under ``roots``; None when there is none."""
    for root in _roots() if roots is None else roots:
        inc = Path(root) / "include"
        version_h = inc / "oneapi" / "dnnl" / "dnnl_version.h"
        if not (inc / "oneapi" / "dnnl" / "dnnl.h").is_file() or not version_h.is_file():
            continue
        found = {k: int(v) for k, v in re.findall(r"#define DNNL_VERSION_(MAJOR|MINOR|PATCH) (\d+)",
                                                   version_h.read_text(errors="replace"))}
        version = (found.get("MAJOR", 0), found.get("MINOR", 0), found.get("PATCH", 0))
        if version[0] != 3:
            continue
        config_h = inc / "oneapi" / "dnnl" / "dnnl_config.h"
        cfg = re.search(r"#define DNNL_CPU_RUNTIME DNNL_RUNTIME_(\w+)", config_h.read_text(errors="replace")) \
            if config_h.is_file() else None
        runtime = cfg.group(1).lower() if cfg else "unknown"
        runtime = {"seq": "sequential"}.get(runtime, runtime)
        for lib_dir in (Path(root) / "lib", Path(root) / "lib64"):
            for so, flag in (("libdnnl.so", "dnnl"), ("libdnnl.so.3", ":libdnnl.so.3")):
                if (lib_dir / so).is_file():
                    return DnnlInstall(str(inc), str(lib_dir), flag, version, runtime)
    return None


_warned = False


def installation() -> DnnlInstall | None:
    """The oneDNN install used for code generation (None, with one logged warning, when absent)."""
    global _warned
    found = _cached_install()
    if found is None and not _warned:
        _warned = True
        log.warning("oneDNN 3.x not found under %s (%s): dot and convolution use the slow elemental loops",
                    ", ".join(_roots()), INSTALL)
    elif found is not None and found.runtime != "tbb" and not _warned:
        _warned = True
        log.warning("oneDNN under %s uses the %s threading runtime, not TBB: with OpenMP every thread that "
                    "calls it gets a team of its own, which slows kernels under TensorFlow's executor and on a "
                    "busy machine (pip uninstall onednn-cpu-gomp onednn-devel-cpu-gomp; %s)",
                    found.lib_dir, found.runtime, INSTALL)
    return found


@functools.lru_cache(maxsize=None)
def _cached_install() -> DnnlInstall | None:
    return find_install()


@functools.lru_cache(maxsize=None)
def effective_isa(lib_dir: str) -> int:
    """oneDNN's ``dnnl_get_effective_cpu_isa()`` (0 when the library cannot be loaded)."""
    try:
        return int(load_library(lib_dir).dnnl_get_effective_cpu_isa())
    except (OSError, AttributeError):
        return 0


def load_library(lib_dir: str) -> ctypes.CDLL:
    """``libdnnl.so`` of ``lib_dir`` loaded into this process, the libraries it needs from that directory
    first (``_DEPENDENCIES``: a library already loaded is found by its name, whatever the search path)."""
    for dep in _DEPENDENCIES:
        if os.path.exists(os.path.join(lib_dir, dep)):
            ctypes.CDLL(os.path.join(lib_dir, dep))
    return ctypes.CDLL(os.path.join(lib_dir, "libdnnl.so.3" if os.path.exists(
        os.path.join(lib_dir, "libdnnl.so.3")) else "libdnnl.so"))


def supports(install: DnnlInstall, dtype: P) -> bool:
    """Whether oneDNN computes ``dtype`` natively on this CPU (f32 always; bf16/f16 need AVX-512 support)."""
    need = _ISA_NEEDED.get(dtype)
    return need is not None and (need == 0 or (effective_isa(install.lib_dir) & need) == need)


# --- what a primitive is made of -------------------------------------------------------------------

@dataclass(frozen=True)
class Tensor:
    """A plain oneDNN view of a buffer: logical dims, element strides, and where the data is.
    ``const`` names the C array of an HLO constant (its data is known at init)."""

    dims: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: P
    ptr: str
    const: str | None = None


@dataclass(frozen=True)
class Eltwise:
    alg: str  # dnnl_eltwise_<alg>
    alpha: float = 0.0
    beta: float = 0.0


@dataclass(frozen=True)
class Binary:
    alg: str  # dnnl_binary_<alg>
    src1: Tensor


PostOp = Eltwise | Binary


@dataclass(frozen=True)
class ConvWindow:
    strides: tuple[int, ...]
    dilates: tuple[int, ...]  # oneDNN's: rhs_dilate - 1
    pad_l: tuple[int, ...]
    pad_r: tuple[int, ...]


# The oneDNN arguments of the src, wei and dst slots of each kind of convolution (``DnnlPrimitive.prop``):
# the slots hold what is read first, read second and written (``dnnl_conv.py`` says which HLO buffer is which).
CONV_ARGS = {
    "forward": ("DNNL_ARG_SRC", "DNNL_ARG_WEIGHTS", "DNNL_ARG_DST"),
    "backward_data": ("DNNL_ARG_DIFF_DST", "DNNL_ARG_WEIGHTS", "DNNL_ARG_DIFF_SRC"),
    "backward_weights": ("DNNL_ARG_SRC", "DNNL_ARG_DIFF_DST", "DNNL_ARG_DIFF_WEIGHTS"),
}


@dataclass
class DnnlPrimitive:
    """A matmul (``conv is None``) or convolution (forward or, by ``prop``, a gradient: ``CONV_ARGS``).
    Weights are used in place when they are a parameter of a matmul, reordered once at init when they
    are a constant, and reordered into the layout oneDNN picks when they are a parameter of a
    convolution, unless they are large (``PLAIN_CONV_WEIGHTS_MIN``) and oneDNN runs the same
    implementation on them in place (chosen at init). Such a reorder runs only on a call whose weights
    differ (memcmp) from a copy of those last reordered, kept in the state with the reordered ones: a
    variable that changes is reordered on the next call whatever its buffer's address. A weight gradient's wei slot is an activation
    (used in place); its result goes through the layout oneDNN picks and one reorder into dst."""

    label: str  # the HLO instruction, for messages
    src: Tensor
    wei: Tensor
    dst: Tensor
    bias: Tensor | None = None
    post_ops: list[PostOp] = field(default_factory=list)
    conv: ConvWindow | None = None
    # (scratch region, its bytes): where dst goes when it is the buffer of a binary post-op's operand (an
    # in-place buffer assignment); oneDNN accumulates in dst before the post-ops read that operand.
    alias_scratch: tuple[str, int] | None = None
    prop: str = "forward"  # a convolution's kind: a key of CONV_ARGS (backward ones take no post-ops)

    @property
    def kind(self) -> str:
        return "matmul" if self.conv is None else "convolution"

    def weights_mode(self) -> str:
        if self.prop == "backward_weights":
            return "plain"
        if self.wei.const is not None:
            return "pack"
        return "reorder" if self.conv is not None else "plain"

    def emit(self, em, install: DnnlInstall) -> None:
        """Register state, init and teardown with ``em.gen`` and write the per-call execution into ``em.buf``."""
        mod = module_state(em.gen, install)
        k = mod.count
        mod.count += 1
        p = f"dnnl{k}"
        n_mem = 4 + len(self.post_ops)
        gen = em.gen
        gen.state_fields.line(f"dnnl_primitive_t {p}_prim, {p}_wre; dnnl_memory_t {p}_m[{n_mem}], {p}_wuser;")
        if self.weights_mode() == "reorder":  # the weights last reordered, and whether m[1] holds them
            gen.state_fields.line(dnnl_weights.state_fields(p))
        if self.prop == "backward_weights":  # the gradient in oneDNN's layout, reordered into dst
            gen.state_fields.line(f"dnnl_primitive_t {p}_dre; dnnl_memory_t {p}_duser;")
        gen.globals.line(self._init_function(p))
        gen.init_code.line(f"if (tfxla_dnnl_init_{k}(st, err, errlen)) return 1;")
        with gen.teardown_code.block(""):
            gen.teardown_code.line(f"if (st->{p}_prim) dnnl_primitive_destroy(st->{p}_prim);")
            gen.teardown_code.line(f"if (st->{p}_wre) dnnl_primitive_destroy(st->{p}_wre);")
            gen.teardown_code.line(f"if (st->{p}_wuser) dnnl_memory_destroy(st->{p}_wuser);")
            if self.weights_mode() == "reorder":
                gen.teardown_code.line(dnnl_weights.teardown(p))
            if self.prop == "backward_weights":
                gen.teardown_code.line(f"if (st->{p}_dre) dnnl_primitive_destroy(st->{p}_dre);")
                gen.teardown_code.line(f"if (st->{p}_duser) dnnl_memory_destroy(st->{p}_duser);")
            gen.teardown_code.line(f"for (int i = 0; i < {n_mem}; ++i) if (st->{p}_m[i]) "
                                   f"dnnl_memory_destroy(st->{p}_m[i]);")
        if not (getattr(em, "outline_nests", False) and self._outlined_run(em.buf, gen, k, p)):
            self._run_code(em.buf, p)

    def _outlined_run(self, out: IndentedBuffer, gen, k: int, p: str) -> bool:
        """In a large computation (``ComputationEmitter.outline_nests``, as its loop nests) the execution is
        ``tfxla_dnnl_run_<k>(pointers, err, errlen)``, never inlined: gcc's cost grows faster than linearly
        with a function's size. False, nothing written, when a pointer is not a plain name."""
        ptrs = [t.ptr for t in (self.src, self.wei, self.dst, self.bias) if t is not None]
        ptrs += [op.src1.ptr for op in self.post_ops if isinstance(op, Binary)]
        ptrs = list(dict.fromkeys(ptrs + ([self.alias_scratch[0]] if self.alias_scratch is not None else [])))
        if not all(x.isidentifier() for x in ptrs):
            return False
        body = IndentedBuffer()
        self._run_code(body, p)
        names = re.compile(r"(?<![\w.%])(" + "|".join(map(re.escape, ptrs)) + r")(?!\w)")
        text = names.sub(lambda m: f"x_[{ptrs.index(m.group(1))}]", body.getvalue())
        gen.globals.line(f"__attribute__((noinline)) static int tfxla_dnnl_run_{k}(void* const* x_, char* err, "
                         f"size_t errlen) {{\n{text}  return 0;\n}}")
        out.line(f"{{ void* const x_[{len(ptrs)}] = {{{', '.join(f'(void*)({x})' for x in ptrs)}}};")
        out.line(f"  if (tfxla_dnnl_run_{k}(x_, err, errlen)) return 1; }}")
        return True

    def _run_code(self, b: IndentedBuffer, p: str) -> None:
        """Point the memory objects at this call's buffers, reorder parameter weights if needed, execute."""
        def step(call: str) -> None:
            b.line(f"if (s_ == dnnl_success) s_ = {call};")

        def point(mem: str, ptr: str) -> None:
            step(f"dnnl_memory_set_data_handle(st_->{mem}, (void*)({ptr}))")

        with b.block(""):
            b.line("tfxla_state* const st_ = tfxla_st;")
            b.line("dnnl_status_t s_ = dnnl_success;")
            b.line("pthread_mutex_lock(&st_->dnnl_mu);  /* concurrent calls share the memory objects */")
            point(f"{p}_m[0]", self.src.ptr)
            aliased = [op.src1.ptr for op in self.post_ops if isinstance(op, Binary)]
            if self.alias_scratch is not None and aliased:
                cond = " || ".join(f"(const void*)({a}) == (const void*)({self.dst.ptr})" for a in aliased)
                b.line(f"const int alias_ = {cond};")
                b.line(f"void* const dst_ = alias_ ? (void*)({self.alias_scratch[0]}) : (void*)({self.dst.ptr});")
                point(f"{p}_m[3]", "dst_")
            elif self.prop == "backward_weights":
                with b.block(f"if (st_->{p}_dre)"):
                    point(f"{p}_duser", self.dst.ptr)
                with b.block("else"):
                    point(f"{p}_m[3]", self.dst.ptr)
            else:
                point(f"{p}_m[3]", self.dst.ptr)
            if self.bias is not None:
                point(f"{p}_m[2]", self.bias.ptr)
            for i, op in enumerate(self.post_ops):
                if isinstance(op, Binary):
                    point(f"{p}_m[{4 + i}]", op.src1.ptr)
            mode = self.weights_mode()
            if mode == "plain":
                point(f"{p}_m[1]", self.wei.ptr)
            elif mode == "reorder":  # only when the weights changed (dnnl_weights.py)
                dnnl_weights.run(b, p, self.wei, point, step)
            args = [f"{{{role}, st_->{p}_m[{slot}]}}" for role, slot in zip(CONV_ARGS[self.prop], (0, 1, 3))]
            if self.bias is not None:
                args.append(f"{{DNNL_ARG_BIAS, st_->{p}_m[2]}}")
            args += [f"{{DNNL_ARG_ATTR_MULTIPLE_POST_OP({i}) | DNNL_ARG_SRC_1, st_->{p}_m[{4 + i}]}}"
                     for i, op in enumerate(self.post_ops) if isinstance(op, Binary)]
            b.line(f"dnnl_exec_arg_t a_[{len(args)}] = {{{', '.join(args)}}};")
            step(f"dnnl_primitive_execute(st_->{p}_prim, st_->dnnl_stream, {len(args)}, a_)")
            if self.prop == "backward_weights":
                with b.block(f"if (st_->{p}_dre)"):
                    b.line(f"dnnl_exec_arg_t da_[2] = {{{{DNNL_ARG_FROM, st_->{p}_m[3]}}, "
                           f"{{DNNL_ARG_TO, st_->{p}_duser}}}};")
                    step(f"dnnl_primitive_execute(st_->{p}_dre, st_->dnnl_stream, 2, da_)")
            step("dnnl_stream_wait(st_->dnnl_stream)")
            if mode == "reorder":
                dnnl_weights.after_run(b, p)
            b.line("pthread_mutex_unlock(&st_->dnnl_mu);")
            if self.alias_scratch is not None and aliased:
                b.line(f"if (alias_ && s_ == dnnl_success) memcpy((void*)({self.dst.ptr}), dst_, "
                       f"{self.alias_scratch[1]});")
            with b.block("if (s_ != dnnl_success)"):
                b.line(f'snprintf(err, errlen, "oneDNN {self.kind} for %s failed: %s", "{_c_text(self.label)}", '
                       f"dnnl_status2str(s_));")
                b.line("return 1;")

    # --- tfxla_dnnl_init_N ----------------------------------------------------------------------
    def _init_function(self, p: str) -> str:
        assert len(self.post_ops) <= MAX_POST_OPS
        k = p[len("dnnl"):]
        what = f"{self.kind} for {_c_text(self.label)}"
        decls, body = IndentedBuffer(), IndentedBuffer()
        arrays: list[str] = []

        def dims(values) -> str:  # a named dnnl_dims_t (compound literals cannot go through the macro)
            name = f"dims{len(arrays)}"
            arrays.append(name)
            decls.line(f"const dnnl_dims_t {name} = {{{', '.join(str(int(v)) for v in values) or '0'}}};")
            return name

        def check(call: str) -> None:
            body.line(f'TFXLA_DNNL_TRY("{what}", {call});')

        def md(target: str, t: Tensor) -> None:
            check(f"dnnl_memory_desc_create_with_strides({target}, {len(t.dims)}, {dims(t.dims)}, "
                  f"{DNNL_TYPES[t.dtype]}, {dims(t.strides)})")

        mode = self.weights_mode()
        check("tfxla_dnnl_engine(&eng)")
        for slot, t in ((0, self.src), (1, self.wei), (3, self.bias), (4, self.dst)):
            if t is not None:
                md(f"&md[{slot}]", t)
        anyw = self.dst if self.prop == "backward_weights" else self.wei  # the weights oneDNN lays out
        if mode != "plain" or self.prop == "backward_weights":
            check(f"dnnl_memory_desc_create_with_tag(&md[2], {len(anyw.dims)}, {dims(anyw.dims)}, "
                  f"{DNNL_TYPES[anyw.dtype]}, dnnl_format_tag_any)")
        check("dnnl_primitive_attr_create(&attr)")
        if self.post_ops:
            check("dnnl_post_ops_create(&po)")
            for i, op in enumerate(self.post_ops):
                if isinstance(op, Eltwise):
                    check(f"dnnl_post_ops_append_eltwise(po, dnnl_eltwise_{op.alg}, "
                          f"{C.literal(op.alpha, P.F32)}, {C.literal(op.beta, P.F32)})")
                else:
                    md(f"&po_md[{i}]", op.src1)
                    check(f"dnnl_post_ops_append_binary(po, dnnl_binary_{op.alg}, po_md[{i}])")
            check("dnnl_primitive_attr_set_post_ops(attr, po)")
        wei_md = "md[1]" if mode == "plain" else "md[2]"
        if self.conv is None:
            check(f"dnnl_matmul_primitive_desc_create(&pd, eng, md[0], {wei_md}, md[3], md[4], attr)")
        elif self.prop != "forward":
            self._backward_pd(check, [dims(v) for v in (self.conv.strides, self.conv.dilates, self.conv.pad_l,
                                                         self.conv.pad_r)])
        else:
            w = self.conv
            names = [dims(v) for v in (w.strides, w.dilates, w.pad_l, w.pad_r)]
            create = (f"dnnl_convolution_forward_primitive_desc_create(%s, eng, dnnl_forward_inference, "
                      f"dnnl_convolution_direct, md[0], %s, md[3], md[4], {', '.join(names)}, attr)")
            check(create % ("&pd", wei_md))
            if mode == "reorder" and math.prod(self.wei.dims) >= PLAIN_CONV_WEIGHTS_MIN:
                # Large parameter weights: reordering them on every call (cache-cold, read + write) costs
                # about as much as the convolution. When oneDNN runs the same implementation on the
                # weights as they are (e.g. brgconv on hwio), use that and skip the reorder; otherwise
                # (e.g. depthwise: brdgmm_dw blocked vs brgconv plain, ~10x slower) keep the blocked one.
                with body.block(""):
                    body.line("dnnl_primitive_desc_t ppd_ = NULL;")
                    body.line("const char *any_ = NULL, *plain_ = NULL;")
                    with body.block(f"if ({create % ('&ppd_', 'md[1]')} == dnnl_success "
                                    "&& dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &any_) "
                                    "== dnnl_success && dnnl_primitive_desc_query(ppd_, dnnl_query_impl_info_str, "
                                    "0, &plain_) == dnnl_success && any_ && plain_ && !strcmp(any_, plain_))"):
                        body.line("dnnl_primitive_desc_destroy(pd);")
                        body.line("pd = ppd_;")
                        body.line("ppd_ = NULL;")
                    body.line("if (ppd_) dnnl_primitive_desc_destroy(ppd_);")
        check(f"dnnl_primitive_create(&st->{p}_prim, pd)")
        check(f"dnnl_memory_create(&st->{p}_m[0], md[0], eng, DNNL_MEMORY_NONE)")
        if self.prop == "backward_weights":
            body.line("wmd = dnnl_primitive_desc_query_md(pd, dnnl_query_diff_weights_md, 0);")
            with body.block("if (dnnl_memory_desc_equal(wmd, md[4]))"):
                check(f"dnnl_memory_create(&st->{p}_m[3], md[4], eng, DNNL_MEMORY_NONE)")
            with body.block("else"):
                check(f"dnnl_memory_create(&st->{p}_m[3], wmd, eng, DNNL_MEMORY_ALLOCATE)")
                check(f"dnnl_memory_create(&st->{p}_duser, md[4], eng, DNNL_MEMORY_NONE)")
                check("dnnl_reorder_primitive_desc_create(&rpd, wmd, eng, md[4], eng, NULL)")
                check(f"dnnl_primitive_create(&st->{p}_dre, rpd)")
        else:
            check(f"dnnl_memory_create(&st->{p}_m[3], md[4], eng, DNNL_MEMORY_NONE)")
        if self.bias is not None:
            check(f"dnnl_memory_create(&st->{p}_m[2], md[3], eng, DNNL_MEMORY_NONE)")
        for i, op in enumerate(self.post_ops):
            if isinstance(op, Binary):
                check(f"dnnl_memory_create(&st->{p}_m[{4 + i}], po_md[{i}], eng, DNNL_MEMORY_NONE)")
        if mode == "plain":
            check(f"dnnl_memory_create(&st->{p}_m[1], md[1], eng, DNNL_MEMORY_NONE)")
        else:
            body.line("wmd = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);")
        if mode == "pack":
            check(f"tfxla_dnnl_pack(eng, st->dnnl_stream, md[1], (void*){self.wei.const}, wmd, &st->{p}_m[1])")
        elif mode == "reorder":
            with body.block("if (dnnl_memory_desc_equal(wmd, md[1]))"):
                check(f"dnnl_memory_create(&st->{p}_m[1], md[1], eng, DNNL_MEMORY_NONE)")
            with body.block("else"):
                check(f"dnnl_memory_create(&st->{p}_m[1], wmd, eng, DNNL_MEMORY_ALLOCATE)")
                check(f"dnnl_memory_create(&st->{p}_wuser, md[1], eng, DNNL_MEMORY_NONE)")
                check("dnnl_reorder_primitive_desc_create(&rpd, md[1], eng, wmd, eng, NULL)")
                check(f"dnnl_primitive_create(&st->{p}_wre, rpd)")
                dnnl_weights.init_copy(body, p, self.wei, what)

        out = IndentedBuffer()
        with out.block(f"static int tfxla_dnnl_init_{k}(tfxla_state* st, char* err, size_t errlen)"):
            out.line("int rc = 0;")
            out.line("dnnl_engine_t eng = NULL;")
            out.line("/* md: src, weights, weights in any layout, bias, dst; po_md: binary post-op operands */")
            out.line(f"dnnl_memory_desc_t md[5] = {{0}}, po_md[{MAX_POST_OPS}] = {{0}};")
            out.line("dnnl_primitive_attr_t attr = NULL;")
            out.line("dnnl_post_ops_t po = NULL;")
            out.line("dnnl_primitive_desc_t pd = NULL, rpd = NULL;")
            out.line("const_dnnl_memory_desc_t wmd = NULL;")
            out.line("(void)wmd;")
            if self.prop != "forward":
                out.line("dnnl_primitive_desc_t hint = NULL;  /* the forward convolution a gradient needs */")
            out.splice(decls)
            out.splice(body)
            out.line("done:")
            out.line("if (rpd) dnnl_primitive_desc_destroy(rpd);")
            out.line("if (pd) dnnl_primitive_desc_destroy(pd);")
            if self.prop != "forward":
                out.line("if (hint) dnnl_primitive_desc_destroy(hint);")
            out.line("if (po) dnnl_post_ops_destroy(po);")
            out.line("if (attr) dnnl_primitive_attr_destroy(attr);")
            out.line("for (int i = 0; i < 5; ++i) if (md[i]) dnnl_memory_desc_destroy(md[i]);")
            out.line(f"for (int i = 0; i < {MAX_POST_OPS}; ++i) if (po_md[i]) dnnl_memory_desc_destroy(po_md[i]);")
            out.line("return rc;")
        return out.getvalue()

    def _backward_pd(self, check, window: list[str]) -> None:
        """Create ``pd``, a gradient convolution, and its forward hint. md[0]/md[1]/md[4] describe the src,
        wei and dst slots (``CONV_ARGS``), md[2] the weights (or weight gradient) in any layout."""
        win = ", ".join(window)
        if self.prop == "backward_weights":  # src = x, wei = dy, dst = dW
            fwd_src, fwd_dst = "md[0]", "md[1]"
            create = f"dnnl_convolution_backward_weights_primitive_desc_create(&pd, eng, dnnl_convolution_direct, " \
                     f"md[0], md[2], NULL, md[1], {win}, hint, NULL)"
        else:  # backward_data: src = dy, wei = w, dst = dx
            fwd_src, fwd_dst = "md[4]", "md[0]"
            create = f"dnnl_convolution_backward_data_primitive_desc_create(&pd, eng, dnnl_convolution_direct, " \
                     f"md[4], md[2], md[0], {win}, hint, NULL)"
        check(f"dnnl_convolution_forward_primitive_desc_create(&hint, eng, dnnl_forward_training, "
              f"dnnl_convolution_direct, {fwd_src}, md[2], NULL, {fwd_dst}, {win}, NULL)")
        check(create)


def _c_text(s: str) -> str:
    """Text safe inside a C string literal (it is printed through %s, never as a format)."""
    return re.sub(r"[^A-Za-z0-9_.%\-]", "_", s)
