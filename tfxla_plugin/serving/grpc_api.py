"""TF Serving's gRPC API over the ``core.ServingCore``: ``PredictionService`` and ``ModelService``.

The services are those of the ``tensorflow-serving-api`` package's protos, served by ``grpcio``'s asyncio
server on the same event loop as the REST app (so both share the worker pool and the batchers), and
the official client stub (``prediction_service_pb2_grpc.PredictionServiceStub``) works unchanged:

* ``Predict``: ``model_spec`` (name; ``version`` or ``version_label``, else the newest; ``signature_name``,
  ``""`` the default) and ``inputs`` as ``TensorProto``s, checked against the signature (dtype and shape);
  ``output_filter`` selects outputs. The answer echoes the model spec with the version that ran.
* ``GetModelMetadata``: ``metadata_field: "signature_def"``, answered with a packed ``SignatureDefMap``.
* ``GetModelStatus`` (``ModelService``): every version's state, or the one asked for.
* ``Classify``, ``Regress``, ``MultiInference``, ``HandleReloadConfigRequest``: UNIMPLEMENTED.

Errors carry the REST answer's message with the matching code (``core.CODES``: NOT_FOUND,
INVALID_ARGUMENT, ...). Without ``grpcio`` or ``tensorflow-serving-api``, ``missing()`` says what to install.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from tfxla_plugin.serving.codec import RequestError, check_array, signature
from tfxla_plugin.serving.config import SERVING_API
from tfxla_plugin.serving.core import CODES, ServingCore

log = logging.getLogger("tfxla_plugin.serving")
INSTALL = f'pip install "grpcio>=1.60" && {SERVING_API}'


def missing() -> str | None:
    """Why gRPC cannot be served here (the packages to install), or None."""
    try:
        import grpc  # noqa: F401
        from tensorflow_serving.apis import prediction_service_pb2_grpc  # noqa: F401
    except ImportError as e:
        return f"gRPC serving needs grpcio and tensorflow-serving-api: {INSTALL} ({e})"
    return None


def _spec_version(spec) -> tuple[int | None, str | None]:
    """(version, label) of a ``ModelSpec`` (its ``version_choice`` oneof; neither: the newest)."""
    choice = spec.WhichOneof("version_choice")
    return (spec.version.value if choice == "version" else None,
            spec.version_label if choice == "version_label" and spec.version_label else None)


def _servicers(core: ServingCore):
    import grpc
    import tensorflow as tf
    from tensorflow_serving.apis import (get_model_metadata_pb2, get_model_status_pb2, model_service_pb2_grpc,
                                         predict_pb2, prediction_service_pb2_grpc)

    State = get_model_status_pb2.ModelVersionStatus.State
    error_codes = get_model_status_pb2.ModelVersionStatus.DESCRIPTOR.fields_by_name["status"] \
        .message_type.fields_by_name["error_code"].enum_type.values_by_name
    timeout = core.options.request_timeout_s

    async def guarded(api: str, context, model_name: str, work: Callable[[], Any]):
        """Runs ``work`` (a coroutine function) with the request timeout; errors aborted with their gRPC code."""
        started = core.begin(model_name, api)
        try:
            result = await asyncio.wait_for(work(), timeout)
        except RequestError as e:
            failure = (e.status, e.message)
        except asyncio.TimeoutError:
            failure = (504, f"request timed out after {timeout:g} s")
        except Exception as e:  # noqa: BLE001  (answer INTERNAL and log it)
            log.exception("internal error in gRPC %s", api)
            failure = (500, f"internal error: {type(e).__name__}: {e}")
        else:
            core.finish(model_name, api, "GRPC", 200, started)
            return result
        core.finish(model_name, api, "GRPC", failure[0], started)
        await context.abort(grpc.StatusCode[CODES.get(failure[0], "UNKNOWN")], failure[1])

    def to_arrays(request, sig) -> dict:
        unknown = [k for k in request.inputs if k not in sig.inputs]
        if unknown:
            raise RequestError(400, f"unknown input '{unknown[0]}'; signature '{sig.name}' takes inputs: "
                                    f"{', '.join(sig.inputs)}")
        missing_inputs = [k for k in sig.inputs if k not in request.inputs]
        if missing_inputs:
            raise RequestError(400, f"missing input '{missing_inputs[0]}' of signature '{sig.name}'")
        arrays = {}
        for k, proto in request.inputs.items():
            try:
                arr = tf.make_ndarray(proto)
            except Exception as e:  # noqa: BLE001  (a malformed TensorProto is the caller's fault)
                raise RequestError(400, f"input '{k}': not a valid TensorProto: {e}") from None
            arrays[k] = check_array(arr, sig.inputs[k], f"input '{k}'")
        return arrays

    class PredictionService(prediction_service_pb2_grpc.PredictionServiceServicer):
        async def Predict(self, request, context):
            spec = request.model_spec

            async def work():
                version, label = _spec_version(spec)
                loop = asyncio.get_running_loop()
                with core.manager.acquire(spec.name, version, label) as servable:
                    sig = signature(servable.model.signatures, spec.signature_name)
                    wanted = list(request.output_filter) or list(sig.outputs)
                    unknown = [k for k in wanted if k not in sig.outputs]
                    if unknown:
                        raise RequestError(400, f"output_filter: unknown output '{unknown[0]}'; signature "
                                                f"'{sig.name}' has outputs: {', '.join(sig.outputs)}")
                    inputs = await loop.run_in_executor(None, to_arrays, request, sig)
                    outputs = await core.predict(servable, sig.name, inputs)
                    response = predict_pb2.PredictResponse()
                    response.model_spec.name = servable.name
                    response.model_spec.version.value = servable.version
                    response.model_spec.signature_name = sig.name

                def encode():
                    for k in wanted:
                        response.outputs[k].CopyFrom(tf.make_tensor_proto(outputs[k]))
                    return response

                return await loop.run_in_executor(None, encode)

            return await guarded("predict", context, spec.name, work)

        async def GetModelMetadata(self, request, context):
            spec = request.model_spec

            async def work():
                fields = list(request.metadata_field)
                if not fields:
                    raise RequestError(400, "GetModelMetadataRequest must specify at least one metadata_field")
                if fields != ["signature_def"]:
                    other = next(f for f in fields if f != "signature_def")
                    raise RequestError(400, f"Metadata field {other} is not supported")
                version, label = _spec_version(spec)
                with core.manager.acquire(spec.name, version, label) as servable:
                    response = get_model_metadata_pb2.GetModelMetadataResponse()
                    response.model_spec.name = servable.name
                    response.model_spec.version.value = servable.version
                    defs = get_model_metadata_pb2.SignatureDefMap()
                    for k, v in servable.model.signature_def_protos.items():
                        defs.signature_def[k].CopyFrom(v)
                    response.metadata["signature_def"].Pack(defs)
                return response

            return await guarded("metadata", context, spec.name, work)

        async def Classify(self, request, context):
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Classify is not supported by tfxla serve; use Predict")

        async def Regress(self, request, context):
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Regress is not supported by tfxla serve; use Predict")

        async def MultiInference(self, request, context):
            await context.abort(grpc.StatusCode.UNIMPLEMENTED,
                                "MultiInference is not supported by tfxla serve; use Predict")

    class ModelService(model_service_pb2_grpc.ModelServiceServicer):
        async def GetModelStatus(self, request, context):
            spec = request.model_spec

            async def work():
                version, label = _spec_version(spec)
                response = get_model_status_pb2.GetModelStatusResponse()
                for s in core.manager.statuses(spec.name, version, label):
                    status = response.model_version_status.add(version=s.version, state=State.Value(s.state))
                    status.status.error_code = error_codes[s.error_code].number
                    status.status.error_message = s.error_message
                return response

            return await guarded("status", context, spec.name, work)

        async def HandleReloadConfigRequest(self, request, context):
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "HandleReloadConfigRequest is not supported by "
                                                               "tfxla serve; versions are picked up from disk")

    return (PredictionService(), prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server,
            ModelService(), model_service_pb2_grpc.add_ModelServiceServicer_to_server)


async def start(core: ServingCore, host: str, port: int):
    """Starts the gRPC server on (host, port) in the running loop; returns (server, bound port).

    Raises ``OSError`` naming the address when it cannot listen there."""
    import grpc

    limit = core.options.max_request_bytes
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", limit),
                                      ("grpc.max_send_message_length", -1), ("grpc.so_reuseport", 0)])
    prediction, add_prediction, models, add_models = _servicers(core)
    add_prediction(prediction, server)
    add_models(models, server)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        bound = server.add_insecure_port(address)
    except RuntimeError as e:
        bound, why = 0, str(e)
    else:
        why = "address in use or not available"
    if not bound:
        raise OSError(f"cannot listen for gRPC on {address}: {why}")
    await server.start()
    return server, bound
