"""``tfxla serve --dir D --model_name NAME [--jit]``: serve a (wrapped) SavedModel over TF Serving's REST API."""

from __future__ import annotations

import argparse
import logging
import sys


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from tfxla_plugin.serving.model import ModelLoadError
    from tfxla_plugin.serving.server import serve

    try:
        return serve(args.dir, args.model_name, host=args.host, port=args.port, tag_set=args.tag_set,
                     batching=args.batching, max_batch_size=args.max_batch_size,
                     batch_timeout_micros=args.batch_timeout_micros, num_workers=args.num_workers,
                     max_request_bytes=args.max_request_bytes, request_timeout_s=args.request_timeout,
                     shutdown_timeout_s=args.shutdown_timeout, inter_op_threads=args.inter_op_threads,
                     header_timeout_s=args.header_timeout, max_headers=args.max_headers,
                     max_header_bytes=args.max_header_bytes, jit=args.jit)
    except (ModelLoadError, ValueError, OSError) as e:
        print(f"tfxla serve: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # interrupted while the model was loading
        return 130


def register(sub) -> None:
    p = sub.add_parser("serve", help="serve a SavedModel over TensorFlow Serving's REST API",
                       description="Serve a (wrapped) SavedModel over TensorFlow Serving's REST API: "
                                   "GET /v1/models/NAME[/metadata], POST /v1/models/NAME:predict.")
    p.add_argument("--dir", required=True, help="the SavedModel directory")
    p.add_argument("--model_name", required=True, help="the NAME in /v1/models/NAME")
    p.add_argument("--port", type=int, default=8501, help="TCP port (default 8501; 0 picks a free one)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--tag_set", default="serve", help="MetaGraphDef tags, comma-separated (default serve)")
    p.add_argument("--jit", action="store_true",
                   help="turn tfxla's Grappler hook on before loading the model, so a plain SavedModel's "
                        "signatures run tfxla's kernels, compiled at their first call (docs/hook.md)")
    p.add_argument("--batching", action="store_true", help="merge concurrent requests into one call")
    p.add_argument("--max_batch_size", type=int, default=32, help="rows per merged call (default 32)")
    p.add_argument("--batch_timeout_micros", type=int, default=2000,
                   help="longest wait for a batch to fill, in microseconds (default 2000)")
    p.add_argument("--num_workers", type=int, default=None,
                   help="threads running signature calls (default min(4, CPUs))")
    p.add_argument("--inter_op_threads", type=int, default=None,
                   help="TensorFlow inter-op threads (default and 0: TensorFlow's default)")
    p.add_argument("--max_request_bytes", type=int, default=64 << 20,
                   help="largest request body accepted (default 64 MiB; larger gets 413)")
    p.add_argument("--request_timeout", type=float, default=60.0,
                   help="seconds before a request is answered 504 (default 60)")
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
