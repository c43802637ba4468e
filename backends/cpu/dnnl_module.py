"""oneDNN's per-module setup in generated C: headers, libraries, the C helpers every primitive's init uses
(``TFXLA_DNNL_TRY``, the engine, ``tfxla_dnnl_pack``), and the stream and mutex in the state (``dnnl.py``
emits the primitives).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from backends.cpu.dnnl import DnnlInstall

# --- per-module setup: headers, helpers, the engine and the stream -----------------------------------

_HELPERS = r"""
#define TFXLA_DNNL_TRY(what, call) do { dnnl_status_t s_ = (call); if (s_ != dnnl_success) { \
  snprintf(err, errlen, "oneDNN %s: %s failed: %s", what, #call, dnnl_status2str(s_)); rc = 1; goto done; } } while (0)
static pthread_mutex_t tfxla_dnnl_mu = PTHREAD_MUTEX_INITIALIZER;
static dnnl_engine_t tfxla_dnnl_eng;  /* one CPU engine per shared object, never destroyed */
static dnnl_status_t tfxla_dnnl_engine(dnnl_engine_t* eng) {
  dnnl_status_t s = dnnl_success;
  pthread_mutex_lock(&tfxla_dnnl_mu);
  if (!tfxla_dnnl_eng) s = dnnl_engine_create(&tfxla_dnnl_eng, dnnl_cpu, 0);
  *eng = tfxla_dnnl_eng;
  pthread_mutex_unlock(&tfxla_dnnl_mu);
  return s;
}
/* *out = a new memory of layout dst_md holding the data at ptr (layout src_md), reordered once. */
__attribute__((unused)) static dnnl_status_t tfxla_dnnl_pack(
    dnnl_engine_t eng, dnnl_stream_t stream, const_dnnl_memory_desc_t src_md, void* ptr,
    const_dnnl_memory_desc_t dst_md, dnnl_memory_t* out) {
  if (dnnl_memory_desc_equal(src_md, dst_md)) return dnnl_memory_create(out, dst_md, eng, ptr);
  dnnl_memory_t src = NULL;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_primitive_t r = NULL;
  dnnl_status_t s = dnnl_memory_create(out, dst_md, eng, DNNL_MEMORY_ALLOCATE);
  if (s == dnnl_success) s = dnnl_memory_create(&src, src_md, eng, ptr);
  if (s == dnnl_success) s = dnnl_reorder_primitive_desc_create(&pd, src_md, eng, dst_md, eng, NULL);
  if (s == dnnl_success) s = dnnl_primitive_create(&r, pd);
  if (s == dnnl_success) {
    dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, *out}};
    s = dnnl_primitive_execute(r, stream, 2, a);
  }
  if (s == dnnl_success) s = dnnl_stream_wait(stream);
  if (r) dnnl_primitive_destroy(r);
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (src) dnnl_memory_destroy(src);
  return s;
}
"""


@dataclass
class _ModuleState:
    count: int = 0


def LIBRARIES(install: DnnlInstall) -> tuple[str, ...]:  # noqa: N802  (a table, read like one)
    """The ``-l`` names a kernel using oneDNN links (also what a rebuild from stored source needs)."""
    return (install.library, "pthread")


def module_state(gen, install: DnnlInstall) -> _ModuleState:
    """Set up oneDNN for this module once: includes, libraries, helpers, and the stream in the state."""
    mod = gen.__dict__.get("_dnnl")
    if mod is not None:
        return mod
    mod = gen.__dict__["_dnnl"] = _ModuleState()
    gen.includes += ["<pthread.h>", '"oneapi/dnnl/dnnl.h"', '"oneapi/dnnl/dnnl_debug.h"']
    gen.libraries += list(LIBRARIES(install))
    gen.include_dirs.append(install.include_dir)
    gen.library_dirs.append(install.lib_dir)  # also the rpath of the shared object
    gen.globals.line(_HELPERS)
    gen.state_fields.line("dnnl_stream_t dnnl_stream;")
    gen.state_fields.line("pthread_mutex_t dnnl_mu;  /* serializes oneDNN work of concurrent calls */")
    gen.state_fields.line("int dnnl_mu_ok;")
    with gen.init_code.block(""):
        gen.init_code.line('if (pthread_mutex_init(&st->dnnl_mu, NULL)) { snprintf(err, errlen, "pthread_mutex_init '
                           'failed"); return 1; }')
        gen.init_code.line("st->dnnl_mu_ok = 1;")
        gen.init_code.line("dnnl_engine_t eng = NULL;")
        gen.init_code.line("dnnl_status_t s = tfxla_dnnl_engine(&eng);")
        gen.init_code.line("if (s == dnnl_success) s = dnnl_stream_create(&st->dnnl_stream, eng, "
                           "dnnl_stream_default_flags);")
        gen.init_code.line('if (s != dnnl_success) { snprintf(err, errlen, "oneDNN engine/stream: %s", '
                           'dnnl_status2str(s)); return 1; }')
    gen.teardown_code.line("if (st->dnnl_stream) dnnl_stream_destroy(st->dnnl_stream);")
    gen.teardown_code.line("if (st->dnnl_mu_ok) pthread_mutex_destroy(&st->dnnl_mu);")
    return mod
