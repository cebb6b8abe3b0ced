"""``SPECRACE_WATCH=1``: a live :class:`gpu_check.vllm.instrument.Recorder` on each V1 runner.

Armed on the runner class: the first ``execute_model`` of each runner installs the recorder's
instance hooks (the input batch is final by then). Per step the recorder polls the counts'
event (``query()`` only); its truth copy goes on a side stream that waits on the producer's
stream, into a small pinned ring, with an event per slot. At each step the steps whose truth
event has completed are judged (:mod:`specrace.plugin.judge`) and dropped: nothing waits.

The watch times itself: each hook's own host time (the hook's span less the span of the vLLM
method it wraps) is summed into ``host_ns``, so nested hooks are not counted twice. It is the
host time the watch adds to the step, measured inside the step, where a tokens/s comparison
between passes drowns in the host's drift from one pass to the next.
"""

from __future__ import annotations

import atexit
import functools
import json
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from gpu_check.vllm.instrument import Recorder

LOG = logging.getLogger("vllm.specrace")
RING = 16  # truth slots in flight; a step whose slot is reused before it landed is skipped


def arm(cls: type, cfg: Any, version: str) -> None:
    orig = getattr(cls, "execute_model")  # noqa: B009 - any runner class

    @functools.wraps(orig)
    def execute_model(self, *args, **kwargs):
        if "_specrace_watch" not in self.__dict__:
            self._specrace_watch = None
            try:
                self._specrace_watch = LiveWatch(self, cfg, version).install()
            except Exception as e:  # a watch that cannot arm leaves the runner as it is
                LOG.warning("specrace: watch not armed: %s: %s", type(e).__name__, e)
            if self._specrace_watch is not None:  # this step through the watch's hook, once
                return self._specrace_watch._execute_model(
                    functools.partial(orig, self))(*args, **kwargs)  # fmt: skip
        return orig(self, *args, **kwargs)

    setattr(cls, "execute_model", execute_model)  # noqa: B010
    LOG.info("specrace: watch armed on vLLM %s (wrong reads to %s, a summary every %d steps)",
             version, cfg.out, cfg.every)  # fmt: skip


def created(folder: Path, stem: str, suffix: str) -> Path:
    """A new empty file ``stem + suffix`` in ``folder`` (``stem-1``, ``stem-2``, ... where the
    name is taken), made exclusively: the watch writes only files it made itself, never one
    that was there (a user's, or another process's with a recycled pid)."""
    for n in range(1000):
        path = folder / f"{stem}{f'-{n}' if n else ''}{suffix}"
        try:
            with path.open("x"):
                return path
        except FileExistsError:
            continue
    raise FileExistsError(f"{folder}: {stem}{suffix} and 999 more names are taken")


class LiveWatch(Recorder):
    def __init__(self, runner: Any, cfg: Any, version: str) -> None:
        super().__init__(runner, level="full", max_steps=RING)
        from gpu_check.vllm.agreement import policy_for

        mode = runner.cache_config.mamba_cache_mode
        self.policy = policy_for("align" if mode == "align" else "none", version)
        self.cfg, self.version = cfg, version
        self.side = self.torch.cuda.Stream()
        self.events = [self.torch.cuda.Event() for _ in range(RING)]
        self.slot_step = [-1] * RING
        self.judged = self.reads = self.wrong = self.skipped = 0
        self.host_ns = 0  # the watch's own host time, all hooks (the module's docstring)
        out = Path(cfg.out)
        out.mkdir(parents=True, exist_ok=True)
        self.jsonl = created(out, f"wrong-reads-{os.getpid()}", ".jsonl")
        self.summary = created(out, f"summary-{os.getpid()}", ".json")
        self.write_totals()  # never an empty summary, whenever the process stops
        atexit.register(self.write_totals)  # the steps after the last summary line

    def _hook(self, obj: Any, name: str, factory) -> None:
        super()._hook(obj, name, self._timed(factory))

    def _timed(self, factory):
        """``factory`` whose hook adds its own time, less its wrapped method's, to ``host_ns``."""
        clock = time.perf_counter_ns

        def make(orig):
            inner = [0]

            def timed_orig(*args, **kwargs):
                t = clock()
                try:
                    return orig(*args, **kwargs)
                finally:
                    inner[0] += clock() - t

            hook = factory(timed_orig)

            def timed(*args, **kwargs):
                t, before = clock(), inner[0]
                try:
                    return hook(*args, **kwargs)
                finally:
                    self.host_ns += clock() - t - (inner[0] - before)

            return timed

        return make

    def slot(self, i: int) -> int | None:
        return i % RING

    def install(self) -> LiveWatch:
        r, ib = self.runner, self.ib
        self._hook(r, "execute_model", self._execute_model)
        self._hook(r, "_update_states", self._update_states)
        self._hook(r, "_prepare_inputs", self._prepare_inputs)
        self._hook(r, "_update_states_after_model_execute", self._after_execute)
        for name, f in (
            ("remove_request", self._remove),
            ("add_request", self._add),
            ("condense", self._condense),
            ("swap_states", self._swap),
        ):
            self._hook(ib, name, f)  # fmt: skip
        return self

    def _execute_model(self, orig):
        hook = super()._execute_model(orig)

        def drained(*args, **kwargs):
            self.drain()
            out = hook(*args, **kwargs)
            cur = self.steps[-1] if self.steps else None
            if cur is not None:  # what a judged step needs only
                cur.pop("buffer_after", None), cur.pop("prev_map", None)
            return out

        return drained

    def _after_execute(self, orig):
        torch = self.torch

        def hook(output_token_ids, scheduler_output):
            out = orig(output_token_ids, scheduler_output)
            cur = self.cur
            i = cur["step"] % RING
            n = int(output_token_ids.size(0))
            if self.align:
                src = self.runner._get_mamba_bufs().postprocess_align.num_accepted_tokens_out
            else:
                src = self.runner.num_accepted_tokens.gpu
            self.side.wait_stream(torch.cuda.current_stream())  # after the producer
            with torch.cuda.stream(self.side):
                self.truth_ring[i, :n].copy_(src[:n].to(torch.int32), non_blocking=True)
                self.events[i].record(self.side)
            src.record_stream(self.side)
            self.slot_step[i] = cur["step"]
            cur["truth_n"] = n
            return out

        return hook

    def drain(self) -> None:
        """Judge every step whose predecessor's truth has landed; never waits."""
        from specrace.plugin.judge import timeline, wrong_reads

        while len(self.steps) >= 2:
            prev, cur = self.steps[0], self.steps[1]
            if "truth_n" not in prev or "t_read_end" not in cur:
                self.steps.pop(0)
                continue
            i = prev["step"] % RING
            if self.slot_step[i] != prev["step"]:  # overwritten: too far behind
                self.skipped += 1
                self.steps.pop(0)
                continue
            if not self.events[i].query():
                return
            prev["truth"] = self.truth_ring[i, : prev["truth_n"]].tolist()
            wrong = wrong_reads(self.policy, prev, cur)
            self.judged += 1
            self.reads += sum(1 for p in cur["prev_positions"] if p >= 0)
            if wrong:
                self.wrong += len(wrong)
                with self.jsonl.open("a") as f:
                    for w in wrong:
                        f.write(json.dumps(w | {"timeline": timeline(cur)}) + "\n")
            if self.judged % self.cfg.every == 0:
                self.log_summary()
            self.steps.pop(0)

    def totals(self) -> dict[str, Any]:
        return {
            "vllm": self.version,
            "policy": self.policy.name,
            "steps": self.judged,
            "reads": self.reads,
            "wrong": self.wrong,
            "skipped_steps": self.skipped,
            "runner_steps": self.count,
            "host_ns": self.host_ns,
        }

    def write_totals(self) -> dict[str, Any]:
        """The totals into this process's summary file: written beside it under a fresh name,
        then renamed over it (a file this watch created, :func:`created`)."""
        t = self.totals()
        fd, tmp = tempfile.mkstemp(dir=self.summary.parent, prefix=f".{self.summary.name}.")
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(t))
        os.replace(tmp, self.summary)
        return t

    def log_summary(self) -> None:
        from specrace.plugin.report import summary_line

        LOG.info("%s", summary_line(self.write_totals()))
