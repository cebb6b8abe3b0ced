"""sim.resolve.host_band's host factor: every CPU-side duration scales, nothing of the GPU's."""

from __future__ import annotations

from dataclasses import fields

from sim.model.params import TimingParams
from sim.resolve.host_band import GPU_FIELDS, NOT_HOST, scale_host


def _timing() -> TimingParams:
    # every duration nonzero, so that a field left out shows
    return TimingParams(worker_sample_tokens_ns_prefill=4_000_000, engine_schedule_ns_base=300_000)


def test_every_host_duration_scales_whatever_its_name_ends_with() -> None:
    """The prefill step's extra sample_tokens time (``..._ns_prefill``) and the scheduler's
    base (``..._ns_base``) are host work: the records show a prefill step's host slowing with
    the rest (docs/forward-prediction.md). Missing them made the model's prefill step grow
    less with the host than vLLM's."""
    t = _timing()
    s = scale_host(t, 2.0)
    host = [f.name for f in fields(t) if f.name.startswith(("worker_", "engine_"))
            and "_ns" in f.name and f.name not in NOT_HOST]  # fmt: skip
    assert {"worker_sample_tokens_ns_prefill", "engine_schedule_ns_base"} <= set(host)
    for name in host:
        assert getattr(s, name) == 2 * getattr(t, name), name


def test_the_gpu_the_measured_hardware_costs_and_the_probabilities_stay() -> None:
    t = _timing()
    s = scale_host(t, 1.7)
    kept = ("gpu_sample_ns", "dma_land_delay_ns", "worker_stall_prob", "worker_slow_prob",
            "worker_slow_factor", "jitter_frac")  # fmt: skip
    for name in (*GPU_FIELDS, *NOT_HOST, *kept):
        assert getattr(s, name) == getattr(t, name), name
