"""``tfxla serve``: serve (wrapped) SavedModels over TF Serving's REST and gRPC APIs, with TF Serving's flags.

The models: ``--dir D`` (one SavedModel, version 1), ``--model_base_path BASE`` (its numbered versions,
new ones picked up while running) or ``--model_config_file F`` (TF Serving's ``model_config_list``).
"""

from __future__ import annotations

import argparse
import logging
import sys


def _bool(text: str) -> bool:
    """TF Serving's boolean flags take ``--flag``, ``--flag=true`` or ``--flag=false``."""
    if text.lower() in ("1", "true", "yes"):
        return True
    if text.lower() in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _options(args: argparse.Namespace) -> dict:
    from tfxla_plugin.serving.config import PROMETHEUS_PATH, parse_batching_parameters, parse_monitoring_config

    options = dict(tag_set=args.tag_set, batching=args.enable_batching, max_batch_size=args.max_batch_size,
                   batch_timeout_micros=args.batch_timeout_micros, num_workers=args.num_workers,
                   max_request_bytes=args.max_request_bytes, request_timeout_s=args.request_timeout,
                   inter_op_threads=args.inter_op_threads, jit=args.jit)
    if args.batching_parameters_file:
        if not args.enable_batching:
            raise ValueError("--batching_parameters_file needs --enable_batching")
        options.update(parse_batching_parameters(args.batching_parameters_file))
    if args.monitoring_config_file:
        options["prometheus_path"] = parse_monitoring_config(args.monitoring_config_file)
    elif args.prometheus:
        options["prometheus_path"] = PROMETHEUS_PATH
    return options


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from tfxla_plugin.serving.model import ModelLoadError
    from tfxla_plugin.serving.server import IF_INSTALLED, serve

    try:
        return serve(args.dir, args.model_name, model_base_path=args.model_base_path,
                     model_config_file=args.model_config_file, host=args.host,
                     port=IF_INSTALLED if args.port is None else args.port,
                     rest_api_port=args.rest_api_port, file_system_poll_wait_seconds=args.file_system_poll_wait_seconds,
                     shutdown_timeout_s=args.shutdown_timeout, header_timeout_s=args.header_timeout,
                     max_headers=args.max_headers, max_header_bytes=args.max_header_bytes, **_options(args))
    except (ModelLoadError, ValueError, OSError, ImportError) as e:
        print(f"tfxla serve: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # interrupted while the models were loading
        return 130


def register(sub) -> None:
    p = sub.add_parser("serve", help="serve SavedModels over TensorFlow Serving's REST and gRPC APIs",
                       description="Serve (wrapped) SavedModels over TensorFlow Serving's REST API (GET "
                                   "/v1/models/NAME[/versions/N|/labels/L][/metadata], POST ...:predict) and gRPC "
                                   "API (PredictionService, ModelService), with TF Serving's flags (docs/serving.md).")
    models = p.add_argument_group("models (exactly one of --dir, --model_base_path, --model_config_file)")
    models.add_argument("--dir", help="one SavedModel directory, served as version 1")
    models.add_argument("--model_base_path",
                        help="a directory of numbered versions BASE/<N>/ (the newest served; new ones picked up)")
    models.add_argument("--model_config_file", help="TF Serving's model_config_list text format: several models, "
                                                    "version policies, version labels")
    models.add_argument("--model_name", default="default", help="the NAME in /v1/models/NAME (default 'default')")
    models.add_argument("--file_system_poll_wait_seconds", type=float, default=1.0,
                        help="how often base paths are checked for new versions (default 1; 0: never)")
    models.add_argument("--tag_set", default="serve", help="MetaGraphDef tags, comma-separated (default serve)")
    models.add_argument("--jit", action="store_true",
                        help="turn tfxla's Grappler hook on before loading the models, so plain SavedModels' "
                             "signatures run tfxla's kernels, compiled at their first call (docs/hook.md)")
    net = p.add_argument_group("ports")
    net.add_argument("--port", default=None,
                     help="gRPC port (default 8500 when grpcio and tensorflow-serving-api are installed; 0 or 'auto' "
                          "picks a free one)")
    net.add_argument("--rest_api_port", default="8501",
                     help="REST port (default 8501; 0 turns REST off, as in TF Serving; 'auto' picks a free one)")
    net.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    batch = p.add_argument_group("batching")
    batch.add_argument("--enable_batching", "--batching", dest="enable_batching", nargs="?", const=True,
                       default=False, type=_bool, help="merge concurrent requests into one call")
    batch.add_argument("--batching_parameters_file",
                       help="TF Serving's BatchingParameters text format (max_batch_size, batch_timeout_micros, "
                            "max_enqueued_batches, num_batch_threads, allowed_batch_sizes)")
    batch.add_argument("--max_batch_size", type=int, default=32, help="rows per merged call (default 32)")
    batch.add_argument("--batch_timeout_micros", type=int, default=2000,
                       help="longest wait for a batch to fill, in microseconds (default 2000)")
    p.add_argument("--monitoring_config_file",
                   help="TF Serving's MonitoringConfig text format: prometheus_config { enable: true } serves "
                        "metrics at /monitoring/prometheus/metrics on the REST port")
    p.add_argument("--prometheus", action="store_true",
                   help="serve the Prometheus metrics at /monitoring/prometheus/metrics (without a config file)")
    p.add_argument("--num_workers", type=int, default=None,
                   help="threads running signature calls (default min(4, CPUs))")
    p.add_argument("--inter_op_threads", type=int, default=None,
                   help="TensorFlow inter-op threads (default and 0: TensorFlow's default)")
    p.add_argument("--max_request_bytes", type=int, default=64 << 20,
                   help="largest request body accepted (default 64 MiB; larger gets 413 / RESOURCE_EXHAUSTED)")
    p.add_argument("--request_timeout", type=float, default=60.0,
                   help="seconds before a request is answered 504 / DEADLINE_EXCEEDED (default 60)")
    p.add_argument("--header_timeout", type=float, default=10.0,
                   help="seconds a client has to send a request's headers, from connecting or from the "
                        "previous response (default 10; later gets 408 and the connection closed)")
    p.add_argument("--max_headers", type=int, default=100,
                   help="most header lines in a request (default 100; more gets 431)")
    p.add_argument("--max_header_bytes", type=int, default=64 << 10,
                   help="largest request line plus headers (default 64 KiB; larger gets 431)")
    p.add_argument("--shutdown_timeout", type=float, default=30.0,
                   help="seconds in-flight requests get to finish on SIGTERM (default 30)")
    p.add_argument("--log_level", default="info", choices=["debug", "info", "warning", "error"],
                   help="debug logs one line per request")
    p.set_defaults(func=run)
