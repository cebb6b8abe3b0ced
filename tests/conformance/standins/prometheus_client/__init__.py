"""Stand-in for ``prometheus_client`` (not in the conformance env): vLLM's metrics modules
import its metric classes at import time; the scheduler under test never records a metric."""

CONTENT_TYPE_LATEST = "text/plain; version=0.0.4; charset=utf-8"


class _Metric:
    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def labels(self, *args: object, **kwargs: object) -> "_Metric":
        return self

    def inc(self, *args: object, **kwargs: object) -> None:
        pass

    def set(self, *args: object, **kwargs: object) -> None:
        pass

    def observe(self, *args: object, **kwargs: object) -> None:
        pass


class Counter(_Metric):
    pass


class Gauge(_Metric):
    pass


class Histogram(_Metric):
    pass


REGISTRY = None  # vllm/parser/metrics.py (0.33.0) passes it to its counters
