// tfxla's pluggable graph optimizer (TF's C API, tensorflow/c/experimental/grappler/grappler.h).
//
// Grappler hands every CPU graph it optimizes (each tf.function body TF instantiates) to
// optimize_func, which passes the serialized GraphDef, the names of the nodes Grappler must preserve
// and the item's id to the Python function tfxla_plugin.hook.callback.optimize(graph: bytes, preserve:
// list[str], name: str) -> bytes | None, under the GIL (PyGILState_Ensure/Release: Grappler calls from TF's
// own threads as well as from the thread that called the function). The compiler stays in Python.
//
// What goes back is always a valid graph and never an error status: the bytes Python returns, or
// the input unchanged when it returns None (switch off, nothing to compile, a failure it logged) or
// raises (reported as unraisable, then cleared). So a failure here never breaks the user's program, and TF logs
// no "PluggableGraphOptimizer failed" line; Python logs the one WARNING that names the cause.
//
// No link against libpython: the interpreter that loaded this library provides the symbols.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tensorflow/c/experimental/grappler/grappler.h"
#include "tensorflow/core/grappler/grappler_item.h"

namespace {

constexpr const char* kModule = "tfxla_plugin.hook.callback";
constexpr const char* kFunction = "optimize";

void FreeBytes(void* data, size_t) { std::free(data); }

void SetOutput(TF_Buffer* out, const void* data, size_t length) {
  void* copy = std::malloc(length ? length : 1);
  if (length) std::memcpy(copy, data, length);
  out->data = copy;
  out->length = length;
  out->data_deallocator = FreeBytes;
}

// The names of the nodes Grappler must keep (fetches, feeds, control outputs), or empty on error.
std::vector<std::string> NodesToPreserve(const TF_GrapplerItem* item) {
  std::vector<std::string> names;
  TF_Status* status = TF_NewStatus();
  int count = 0;
  size_t storage_size = 0;
  TF_GetNodesToPreserveListSize(item, &count, &storage_size, status);
  if (TF_GetCode(status) == TF_OK && count > 0) {
    std::vector<char*> values(count);
    std::vector<size_t> lengths(count);
    std::vector<char> storage(storage_size ? storage_size : 1);
    TF_GetNodesToPreserveList(item, values.data(), lengths.data(), count, storage.data(), storage_size,
                              status);
    if (TF_GetCode(status) == TF_OK) {
      for (int i = 0; i < count; ++i) names.emplace_back(values[i], lengths[i]);
    }
  }
  TF_DeleteStatus(status);
  return names;
}

// The item's id: for a function body, the name of the function TF instantiates (`__inference_f_12`),
// which is how `tfxla_plugin.explain_hooked` finds what the hook did to a function. The C API has no accessor
// for it; a TF_GrapplerItem is a grappler::GrapplerItem (TF's own TF_GetNodesToPreserveList casts it so),
// and this library is built against the headers of the TF that loads it (tfxla_plugin._op).
std::string ItemId(const TF_GrapplerItem* item) {
  return reinterpret_cast<const tensorflow::grappler::GrapplerItem*>(item)->id;
}

// Calls the Python side; true (and `out` filled) when it returned bytes.
bool CallPython(const TF_Buffer* graph, const std::vector<std::string>& preserve, const std::string& id,
                TF_Buffer* out) {
  bool ok = false;
  PyObject* module = PyImport_ImportModule(kModule);
  PyObject* names = module ? PyList_New(static_cast<Py_ssize_t>(preserve.size())) : nullptr;
  if (names) {
    for (size_t i = 0; i < preserve.size(); ++i) {
      PyList_SET_ITEM(names, i, PyUnicode_FromStringAndSize(preserve[i].data(), preserve[i].size()));
    }
    PyObject* result = PyObject_CallMethod(module, kFunction, "y#Os#", static_cast<const char*>(graph->data),
                                           static_cast<Py_ssize_t>(graph->length), names, id.data(),
                                           static_cast<Py_ssize_t>(id.size()));
    if (result && PyBytes_Check(result)) {
      SetOutput(out, PyBytes_AS_STRING(result), static_cast<size_t>(PyBytes_GET_SIZE(result)));
      ok = true;
    }
    Py_XDECREF(result);
  }
  // The Python side catches its own errors; this is a last resort (an import that fails). Unlike
  // PyErr_Print, PyErr_WriteUnraisable never exits the process on SystemExit; it clears the error.
  if (PyErr_Occurred()) PyErr_WriteUnraisable(nullptr);
  Py_XDECREF(names);
  Py_XDECREF(module);
  return ok;
}

void* Create() { return nullptr; }
void Destroy(void*) {}

void Optimize(void*, const TF_Buffer* graph, const TF_GrapplerItem* item, TF_Buffer* out, TF_Status* status) {
  std::vector<std::string> preserve = NodesToPreserve(item);
  std::string id = ItemId(item);
  bool rewritten = false;
  if (Py_IsInitialized()) {
    PyGILState_STATE gil = PyGILState_Ensure();
    rewritten = CallPython(graph, preserve, id, out);
    PyGILState_Release(gil);
  }
  if (!rewritten) SetOutput(out, graph->data, graph->length);
  TF_SetStatus(status, TF_OK, "");
}

}  // namespace

extern "C" void TF_InitGraph(TP_OptimizerRegistrationParams* params, TF_Status* status) {
  params->struct_size = TP_OPTIMIZER_REGISTRATION_PARAMS_STRUCT_SIZE;
  params->major_version = GO_MAJOR;
  params->minor_version = GO_MINOR;
  params->patch_version = GO_PATCH;
  params->device_type = "CPU";
  params->optimizer_configs->struct_size = TP_OPTIMIZER_CONFIGS_STRUCT_SIZE;
  params->optimizer->struct_size = TP_OPTIMIZER_STRUCT_SIZE;
  params->optimizer->create_func = Create;
  params->optimizer->optimize_func = Optimize;
  params->optimizer->destroy_func = Destroy;
  TF_SetStatus(status, TF_OK, "");
}
