"""Hooks on one live vLLM model runner V2 (``vllm/v1/worker/gpu/``, MRv2): the counts GDN read.

MRv2 keeps the accepted counts on the GPU only, in ``model_state.num_accepted_tokens_gpu``,
indexed by a request's stable state slot, not by its batch row: ``postprocess_state`` scatters
``max(num_sampled, 1)`` into the slots of step N's requests, and step N+1's ``prepare_attn``
gathers them through ``input_batch.idx_mapping`` (docs/versions.md, MRv2). There is no pinned
row-indexed buffer and no row op to race with, so what is worth recording is only what the GDN
layers were given against what step N produced. Per engine step:

- ``execute_model``: entry time, the scheduled requests and drafts (scheduler output);
- the step's first ``model_state.prepare_attn``: the batch order (``input_batch.req_ids``) and a
  stream-ordered copy of ``num_accepted_tokens_gpu[idx_mapping]`` (the gather ``prepare_attn``
  itself does next, so the value GDN reads) into a private pinned ring; then the optional GPU
  delay (``torch.cuda._sleep``), which sits before the forward on the same stream;
- ``model_state.postprocess_state`` with a tensor ``num_sampled``: stream-ordered copies of
  ``num_sampled`` and ``idx_mapping`` (the truth: the count each request's slot gets).

No hook synchronizes. ``level="timing"`` keeps only the step clock and the GPU delay.

The same hooks serve 0.33.0 and 0.34.0 (0.34.0 has MRv2 only): the hooked methods and the
count path did not change between them (:data:`HOOK_POINTS`; ``tests/gpu_check/
vllm/test_instrument.py`` checks each against a release's source). In
``vllm/v1/worker/gpu/model_states/mamba_hybrid.py``, 0.33.0 / 0.34.0: the slot counts
``num_accepted_tokens_gpu`` L86 / L90, 1 on ``add_request`` L115 / L126, the gather in
``prepare_attn`` L277 / L296, the scatter and fill kernels of ``postprocess_state`` L363-374 /
L401-412; ``model_runner.py`` calls ``preprocess_state`` (align's block-crossing reset to 1)
before ``prepare_attn``: L1870, L1967 / L1932, L2035. What 0.34.0 added beside the counts
(ReplaySSM, ``use_flashinfer_replayssm``, the extensible KV cache) is off in these runs.
"""

from __future__ import annotations

from typing import Any

from gpu_check.vllm.instrument import Hooks, now

# What the hooks rely on, per object: method -> the parameters it reads, in call order (the
# hooks take ``input_batch`` / ``idx_mapping, num_sampled`` positionally and ``for_capture``
# by keyword, as ``model_runner.py`` passes them).
HOOK_POINTS: dict[str, dict[str, tuple[str, ...]]] = {
    "runner": {"execute_model": ("scheduler_output",)},
    "model_state": {
        "prepare_attn": ("input_batch", "for_capture"),
        "postprocess_state": ("idx_mapping", "num_sampled"),
    },
}


def is_v2_runner(runner: Any) -> bool:
    return type(runner).__module__.startswith("vllm.v1.worker.gpu.")


class RecorderV2(Hooks):
    def __init__(self, runner: Any, level: str = "full", gpu_delay_us: int = 0,
                 max_steps: int = 8192, ns_per_cycle: float | None = None) -> None:  # fmt: skip
        super().__init__(runner, level, gpu_delay_us, max_steps, ns_per_cycle)
        torch = self.torch
        self.ms = runner.model_state
        shape = (max_steps if level == "full" else 1, self.max_reqs)
        self.consumed_ring = torch.zeros(shape, dtype=torch.int32, pin_memory=True)
        self.sampled_ring = torch.zeros(shape, dtype=torch.int32, pin_memory=True)
        self.slot_ring = torch.zeros(shape, dtype=torch.int64, pin_memory=True)

    def install(self) -> RecorderV2:
        self._hook(self.runner, "execute_model", self._execute_model)
        self._hook(self.ms, "prepare_attn", self._prepare_attn)
        if self.level == "full":
            self._hook(self.ms, "postprocess_state", self._postprocess_state)
        return self

    def _execute_model(self, orig):
        def hook(scheduler_output, *args, **kwargs):
            so = scheduler_output
            cur: dict[str, Any] = {"step": len(self.steps), "t_enter": now()}
            if self.level == "full":
                cur["num_scheduled"] = {k: int(v) for k, v in so.num_scheduled_tokens.items()}
                cur["spec"] = {k: len(v) for k, v in so.scheduled_spec_decode_tokens.items()}
                cur["finished"] = sorted(so.finished_req_ids)
                cur["new"] = [d.req_id for d in so.scheduled_new_reqs]
            self.steps.append(cur)
            self.cur = cur
            try:
                return orig(scheduler_output, *args, **kwargs)
            finally:
                cur["t_exit"] = now()

        return hook

    def _prepare_attn(self, orig):
        def hook(input_batch, *args, **kwargs):
            cur = self.cur
            if cur is not None and "req_ids" not in cur and not kwargs.get("for_capture"):
                n = int(input_batch.num_reqs)
                cur["req_ids"] = list(input_batch.req_ids[:n])
                i = cur["step"]
                if self.level == "full" and i < self.max_steps and n:
                    got = self.ms.num_accepted_tokens_gpu[input_batch.idx_mapping[:n]]
                    self.consumed_ring[i, :n].copy_(got.to(self.torch.int32), non_blocking=True)
                    cur["consumed_slot"] = i
                if self.sleep_cycles:
                    self.torch.cuda._sleep(self.sleep_cycles)
            return orig(input_batch, *args, **kwargs)

        return hook

    def _postprocess_state(self, orig):
        def hook(idx_mapping, num_sampled, *args, **kwargs):
            out = orig(idx_mapping, num_sampled, *args, **kwargs)
            cur = self.cur
            if cur is not None and not isinstance(num_sampled, int) and "sampled_n" not in cur:
                i, n = cur["step"], int(idx_mapping.shape[0])
                if i < self.max_steps and n:
                    t = self.torch
                    self.sampled_ring[i, :n].copy_(num_sampled[:n].to(t.int32), non_blocking=True)
                    self.slot_ring[i, :n].copy_(idx_mapping[:n].to(t.int64), non_blocking=True)
                    cur["sampled_n"] = n
            return out

        return hook

    def finish(self) -> list[dict[str, Any]]:
        """Wait for the GPU, then attach consumed and sampled counts to each step."""
        self.torch.cuda.synchronize()
        if self.level != "full":
            return self.steps
        consumed, sampled = self.consumed_ring.numpy(), self.sampled_ring.numpy()
        slots = self.slot_ring.numpy()
        for s in self.steps:
            i = s["step"]
            if "consumed_slot" in s:
                s["consumed"] = consumed[i, : len(s["req_ids"])].tolist()
            if "sampled_n" in s:
                s["num_sampled"] = sampled[i, : s["sampled_n"]].tolist()
                s["slots"] = slots[i, : s["sampled_n"]].tolist()
        return self.steps
