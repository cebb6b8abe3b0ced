"""Hooks on one live vLLM ``GPUModelRunner`` (V1): what every step did, with host times.

Instance attributes shadow the runner's and the input batch's methods; each hook records and
calls the original unchanged. ``uninstall`` deletes them again. Per engine step N:

- ``execute_model``: the scheduler output (finished, new with prompt length, cached and resumed
  requests, tokens and drafts scheduled per request), entry and exit times, and at exit a copy
  of the pinned counts buffer ``input_batch.num_accepted_tokens_cpu`` (what step N+1's row ops
  start from: N's gather write-back, after align's ``preprocess_mamba`` reset);
- every row op of ``_update_states`` (``remove_request``, ``add_request``, each move of
  ``condense``, ``swap_states``) with ``time.perf_counter_ns`` before and after and a poll of
  ``num_accepted_tokens_event.query()`` before and after (did step N-1's D2H land yet?). The
  moves of one ``condense`` call share its times: vLLM does them in one method;
- ``_prepare_inputs``: a poll at entry (before its event wait), the layout (req_ids,
  num_computed, num_prompt), ``prev_num_draft_tokens``, and at exit ``num_accepted_tokens.np``
  (the CPU value: the gather in align, 1s in none), ``prev_positions`` and the discard mask;
- the first ``_model_forward`` of the step: a stream-ordered copy of ``num_accepted_tokens.gpu``
  into a private pinned ring (what the GDN layers read), then the optional GPU delay
  (``torch.cuda._sleep``) before the forward;
- ``_update_states_after_model_execute``: a stream-ordered copy of the counts the D2H carries
  (align: the fused postprocess output; none: ``num_accepted_tokens.gpu``) into a second
  private ring: the truth, read only after the run.

No hook synchronizes: ``event.query()`` only asks. ``level="timing"`` keeps only the entry time
of ``execute_model`` and the forward hook's GPU delay (the baseline the instrumented step time
is compared with).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

now = time.perf_counter_ns
_NONE = object()  # no instance attribute of that name before a hook


class Hooks:
    """A recorder of one runner's steps (V1 :class:`Recorder`, MRv2's ``RecorderV2``): the
    state both keep, and instance attributes that shadow methods of live objects, removed
    again by ``uninstall``."""

    def __init__(self, runner: Any, level: str, gpu_delay_us: int, max_steps: int,
                 ns_per_cycle: float | None) -> None:  # fmt: skip
        import torch

        self.torch = torch
        self.runner = runner
        self.level = level
        self.max_reqs = int(runner.max_num_reqs)
        self.max_steps = max_steps
        self.steps: list[dict[str, Any]] = []
        self.count = 0  # steps begun (a live watch drops judged steps from ``steps``)
        self.cur: dict[str, Any] | None = None
        self.sleep_cycles = 0  # the GPU delay: a spin on the stream per step
        if gpu_delay_us:
            self.sleep_cycles = int(gpu_delay_us * 1000 / (ns_per_cycle or calibrate_sleep()))
        self._saved: list[tuple[Any, str, Any]] = []

    def _hook(self, obj: Any, name: str, factory) -> None:
        orig = getattr(obj, name)
        below = getattr(obj, "__dict__", {}).get(name, _NONE)  # another recorder's hook
        setattr(obj, name, factory(orig))
        self._saved.append((obj, name, below))

    def uninstall(self) -> None:
        """Remove this recorder's hooks; a hook it was installed over is put back, so two
        recorders on one runner (the plugin's watch over ``vllm-run``'s) come off in reverse."""
        for obj, name, below in reversed(self._saved):
            if below is _NONE:
                delattr(obj, name)
            else:
                setattr(obj, name, below)
        self._saved.clear()


class Recorder(Hooks):
    def __init__(self, runner: Any, level: str = "full", gpu_delay_us: int = 0,
                 max_steps: int = 8192, ns_per_cycle: float | None = None) -> None:  # fmt: skip
        super().__init__(runner, level, gpu_delay_us, max_steps, ns_per_cycle)
        torch = self.torch
        self.ib = runner.input_batch
        self.align = runner.cache_config.mamba_cache_mode == "align"
        self.in_update = False
        if level == "full":
            shape = (max_steps, self.max_reqs)
            self.truth_ring = torch.zeros(shape, dtype=torch.int32, pin_memory=True)
            self.gpu_ring = torch.zeros(shape, dtype=torch.int32, pin_memory=True)

    # -- install -----------------------------------------------------------------------------
    def install(self) -> Recorder:
        r, ib = self.runner, self.ib
        self._hook(r, "execute_model", self._execute_model)
        self._hook(r, "_model_forward", self._model_forward)
        if self.level == "full":
            self._hook(r, "_update_states", self._update_states)
            self._hook(r, "_prepare_inputs", self._prepare_inputs)
            self._hook(r, "_update_states_after_model_execute", self._after_execute)
            self._hook(ib, "remove_request", self._remove)
            self._hook(ib, "add_request", self._add)
            self._hook(ib, "condense", self._condense)
            self._hook(ib, "swap_states", self._swap)
        return self

    def slot(self, i: int) -> int | None:
        """Step ``i``'s row of the private rings (None: past them); a live watch wraps."""
        return i if i < self.max_steps else None

    def _landed(self) -> bool:
        ev = self.runner.num_accepted_tokens_event
        return True if ev is None else bool(ev.query())

    # -- runner hooks --------------------------------------------------------------------------
    def _execute_model(self, orig):
        def hook(scheduler_output, *args, **kwargs):
            t_enter = now()
            self.count += 1
            if self.level != "full":
                self.steps.append({"t_enter": t_enter})
                return orig(scheduler_output, *args, **kwargs)
            so = scheduler_output
            cached = so.scheduled_cached_reqs
            cur = {
                "step": self.count - 1,
                "t_enter": t_enter,
                "finished": sorted(so.finished_req_ids),
                "new": [
                    [d.req_id, len(d.prompt_token_ids or ()), int(d.num_computed_tokens)]
                    for d in so.scheduled_new_reqs
                ],  # fmt: skip
                "cached": list(cached.req_ids),
                "resumed": sorted(getattr(cached, "resumed_req_ids", ()) or ()),
                "num_scheduled": {k: int(v) for k, v in so.num_scheduled_tokens.items()},
                "spec": {k: len(v) for k, v in so.scheduled_spec_decode_tokens.items()},
                "ops": [],
            }
            self.steps.append(cur)
            self.cur = cur
            try:
                return orig(scheduler_output, *args, **kwargs)
            finally:
                cur["t_exit"] = now()
                cur["buffer_after"] = self.ib.num_accepted_tokens_cpu[: self.max_reqs].tolist()

        return hook

    def _model_forward(self, orig):
        def hook(*args, **kwargs):
            cur = self.cur
            if cur is not None and "gpu_slot" not in cur and self.level == "full":
                i = self.slot(cur["step"])
                if i is not None:
                    n = cur.get("n", 0)
                    src = self.runner.num_accepted_tokens.gpu[:n]
                    self.gpu_ring[i, :n].copy_(src.to(self.torch.int32), non_blocking=True)
                    cur["gpu_slot"] = i
            if self.sleep_cycles:
                self.torch.cuda._sleep(self.sleep_cycles)
            return orig(*args, **kwargs)

        return hook

    def _update_states(self, orig):
        def hook(scheduler_output):
            cur = self.cur
            cur["t_us_start"] = now()
            cur["landed_at_update_states"] = self._landed()
            self.in_update = True
            try:
                return orig(scheduler_output)
            finally:
                self.in_update = False
                cur["t_us_end"] = now()

        return hook

    def _prepare_inputs(self, orig):
        def hook(scheduler_output, num_scheduled_tokens, *args, **kwargs):
            cur, r, ib = self.cur, self.runner, self.ib
            landed = self._landed()
            cur["t_read"] = now()
            cur["landed_at_read"] = landed
            n = ib.num_reqs
            cur["n"] = n
            cur["req_ids"] = list(ib.req_ids[:n])
            cur["num_sched_rows"] = [int(x) for x in num_scheduled_tokens[:n]]
            cur["num_computed"] = ib.num_computed_tokens_cpu[:n].tolist()
            cur["num_prompt"] = ib.num_prompt_tokens[:n].tolist()
            pnd = getattr(r, "prev_num_draft_tokens", None)
            cur["prev_num_draft_tokens"] = [] if pnd is None else pnd.np[: self.max_reqs].tolist()
            cur["prev_map"] = dict(ib.prev_req_id_to_index or {})
            out = orig(scheduler_output, num_scheduled_tokens, *args, **kwargs)
            cur["t_read_end"] = now()
            cur["cpu_value"] = r.num_accepted_tokens.np[:n].tolist()
            cur["prev_positions"] = r.prev_positions.np[:n].tolist()
            cur["discard"] = [bool(x) for x in r.discard_request_mask.np[:n]]
            return out

        return hook

    def _after_execute(self, orig):
        def hook(output_token_ids, scheduler_output):
            out = orig(output_token_ids, scheduler_output)
            cur = self.cur
            i = self.slot(cur["step"])
            if i is not None:
                n = int(output_token_ids.size(0))
                if self.align:
                    src = self.runner._get_mamba_bufs().postprocess_align.num_accepted_tokens_out
                else:
                    src = self.runner.num_accepted_tokens.gpu
                self.truth_ring[i, :n].copy_(src[:n].to(self.torch.int32), non_blocking=True)
                cur["truth_n"] = n
                cur["truth_req_ids"] = list(self.ib.req_ids[:n])
                cur["t_d2h_issued"] = now()
            return out

        return hook

    # -- input batch hooks ---------------------------------------------------------------------
    def _op(self, kind: str, a: int, b: int, req_id: str, t0: int, t1: int,
            before: bool, after: bool, group: int = -1) -> None:  # fmt: skip
        assert self.cur is not None, "a row op outside a step"
        self.cur["ops"].append([kind, a, b, req_id, t0, t1, before, after, group])

    def _remove(self, orig):
        def hook(req_id):
            if not self.in_update:
                return orig(req_id)
            row = self.ib.req_id_to_index.get(req_id)
            before, t0 = self._landed(), now()
            out = orig(req_id)
            t1 = now()
            if row is not None:
                self._op("remove", row, -1, req_id, t0, t1, before, self._landed())
            return out

        return hook

    def _add(self, orig):
        def hook(request):
            if not self.in_update:
                return orig(request)
            before, t0 = self._landed(), now()
            row = orig(request)
            t1 = now()
            self._op("add", int(row), -1, request.req_id, t0, t1, before, self._landed())
            return row

        return hook

    def _condense(self, orig):
        def hook():
            if not self.in_update:
                return orig()
            rows_before = {rid: i for i, rid in enumerate(self.ib._req_ids) if rid is not None}
            before, t0 = self._landed(), now()
            out = orig()
            t1 = now()
            after = self._landed()
            group = len(self.cur["ops"])
            moved = [(dst, rid) for dst, rid in enumerate(self.ib._req_ids)
                     if rid is not None and rows_before.get(rid) != dst]  # fmt: skip
            for dst, rid in moved:  # vLLM fills the lowest hole first
                self._op("move", rows_before[rid], dst, rid, t0, t1, before, after, group)
            return out

        return hook

    def _swap(self, orig):
        def hook(i1, i2):
            if not self.in_update:
                return orig(i1, i2)
            rid = self.ib._req_ids[i1]
            before, t0 = self._landed(), now()
            out = orig(i1, i2)
            t1 = now()
            self._op("swap", int(i1), int(i2), rid, t0, t1, before, self._landed())
            return out

        return hook

    # -- after the run -------------------------------------------------------------------------
    def finish(self) -> list[dict[str, Any]]:
        """Wait for the GPU, then attach the truth and the consumed counts to each step."""
        self.torch.cuda.synchronize()
        if self.level != "full":
            return self.steps
        truth = self.truth_ring.numpy()
        gpu = self.gpu_ring.numpy()
        for s in self.steps:
            i = s["step"]
            if "truth_n" in s:
                s["truth"] = truth[i, : s["truth_n"]].tolist()
            if "gpu_slot" in s:
                s["gpu_value"] = gpu[i, : s.get("n", 0)].tolist()
        return self.steps


def calibrate_sleep() -> float:
    """Nanoseconds per ``torch.cuda._sleep`` cycle on this GPU (timed with CUDA events)."""
    from gpu_check.replay.calibrate import spin_ns_per_cycle

    return spin_ns_per_cycle()


def step_intervals_ms(steps: list[dict[str, Any]]) -> np.ndarray:
    t = np.asarray([s["t_enter"] for s in steps], dtype=np.int64)
    return np.diff(t) / 1e6
