"""Prometheus metrics of ``tfxla serve``, under TF Serving's names, on its ``/monitoring/prometheus/metrics`` path.

Enabled by ``--monitoring_config_file`` (``prometheus_config { enable: true }``, as in TF Serving) and
served on the REST port. Each app has its own registry (several apps in one process do not share
counters). Metrics, with TF Serving's ``/tensorflow/serving/...`` names written the way TF Serving
exports them to Prometheus (``/`` as ``:``):

* ``:tensorflow:serving:request_count`` (counter; labels ``model_name``, ``status``: ``OK`` or the error
  code, e.g. ``INVALID_ARGUMENT``): predict requests, REST and gRPC;
* ``:tensorflow:serving:request_latency`` (histogram, microseconds as in TF Serving; labels
  ``model_name``, ``API`` (predict, metadata, status), ``entrypoint`` (REST, GRPC));
* ``:tensorflow:serving:batch_size`` (histogram; label ``model_name``): rows per signature call the
  batcher made (with ``--enable_batching``).
"""

from __future__ import annotations

PROMETHEUS_CLIENT = 'pip install "prometheus-client>=0.20"'
_LATENCY_US = tuple(10.0 * 2 ** i for i in range(24))  # 10 us .. ~84 s
_BATCH_ROWS = tuple(float(2 ** i) for i in range(11))  # 1 .. 1024


class Metrics:
    """The counters and histograms of one app; ``text()`` is the Prometheus exposition."""

    def __init__(self):
        try:
            import prometheus_client
        except ImportError as e:
            raise ImportError(f"--monitoring_config_file with Prometheus needs prometheus-client: "
                              f"{PROMETHEUS_CLIENT} ({e})") from None
        self._client = prometheus_client
        self.registry = prometheus_client.CollectorRegistry()
        self.requests = prometheus_client.Counter(
            ":tensorflow:serving:request_count", "Predict requests by model and status (REST and gRPC)",
            ["model_name", "status"], registry=self.registry)
        self.latency = prometheus_client.Histogram(
            ":tensorflow:serving:request_latency", "Request wall time in microseconds",
            ["model_name", "API", "entrypoint"], buckets=_LATENCY_US, registry=self.registry)
        self.batch_size = prometheus_client.Histogram(
            ":tensorflow:serving:batch_size", "Rows per signature call made by the batcher",
            ["model_name"], buckets=_BATCH_ROWS, registry=self.registry)

    def request(self, model_name: str, api: str, entrypoint: str, status: str, seconds: float) -> None:
        if api == "predict":
            self.requests.labels(model_name, status).inc()
        self.latency.labels(model_name, api, entrypoint).observe(seconds * 1e6)

    def batch(self, model_name: str, rows: int) -> None:
        self.batch_size.labels(model_name).observe(rows)

    def text(self) -> tuple[bytes, str]:
        """(body, content type) of the exposition."""
        return self._client.generate_latest(self.registry), self._client.CONTENT_TYPE_LATEST
