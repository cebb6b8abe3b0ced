"""The plugin's watch inside ``vllm-run``, checked read for read against the recorder (issue 46).

``vllm-run --watch`` arms the watch exactly as a server's ``SPECRACE_WATCH=1`` does
(``specrace.plugin.register()`` on the runner class) in every instrumented pass, under
``vllm-run``'s own recorder: the class is armed first, the recorder's hooks go on the runner,
and at the pass's first step the watch installs its hooks over the recorder's. Both see the
same steps; the recorder keeps everything for the export, the watch judges as it goes and
keeps only its wrong reads. After the pass the device is synchronized, the watch judges what
is left, its hooks come off (then the recorder's), and its wrong reads go into the raw record.

``vllm-export`` then writes ``watch.json``: the watch's wrong reads against the reads the export
observed wrong, keyed by (engine step, request, count consumed, true count), and the reads
each side counted. ``equal`` is the issue's criterion: the same wrong reads, no step skipped,
and as many reads judged as the export has.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpu_check.vllm.consumed import consumed_column

KEYS = ("step", "req_id", "consumed", "true_count")
KEPT = (*KEYS, "row", "prev_row", "cpu_value", "kind", "land_pos")  # per wrong read, in raw


class PassWatch:
    """The watch of one pass; :meth:`finish` after the pass's requests are done."""

    def __init__(self, runner: Any, state: str) -> None:
        self.runner, self.state = runner, state

    def finish(self) -> dict[str, Any]:
        """Synchronize, let the watch judge the rest, take its hooks off (they lie over the
        recorder's), and return its totals and wrong reads."""
        import torch

        from gpu_check.vllm.plugin_bench import watch_totals

        torch.cuda.synchronize()
        totals = watch_totals(self.runner)
        watch = self.runner.__dict__.get("_specrace_watch")
        if watch is not None:
            watch.uninstall()
        if totals is None:
            return {"state": self.state, "armed": False}
        jsonl, _summary = totals.pop("_files")
        wrong = []
        if jsonl.is_file():
            for line in jsonl.read_text().splitlines():
                w = json.loads(line)
                wrong.append({k: w[k] for k in KEPT})
        return {"state": self.state, "armed": True, **totals, "wrong_reads": wrong}


@contextmanager
def watched(runner: Any, folder: Path) -> Iterator[PassWatch]:
    """The plugin loaded with ``SPECRACE_WATCH=1`` (out: ``folder``) for one pass; enter it
    before the recorder installs, call ``finish`` before the recorder uninstalls."""
    from gpu_check.vllm.plugin_bench import plugin_arm

    with plugin_arm("watch", runner, folder) as state:
        if state != "installed":
            raise RuntimeError(f"vllm-run --watch: the plugin did not install ({state})")
        yield PassWatch(runner, state)


def stood_aside(runner: Any, folder: Path) -> dict[str, Any]:
    """MRv2: the plugin loaded with ``SPECRACE_WATCH=1`` in this process, as a server's would be.
    It must stand aside: state ``not-applicable`` and the V1 runner class left as it was (by
    identity, every entry of its ``__dict__``)."""
    from vllm.v1.worker import gpu_model_runner

    from gpu_check.vllm.plugin_bench import class_changes, plugin_arm

    v1 = gpu_model_runner.GPUModelRunner
    saved = dict(v1.__dict__)
    with plugin_arm("watch", runner, folder) as state:
        changed = class_changes(v1, saved)
    return {"state": state, "armed": False, "v1_class_changed": changed}


def compare_stood_aside(raw: dict[str, Any], reads: pd.DataFrame) -> dict[str, Any]:
    """An MRv2 pass under ``vllm-run --watch``: as it should be when the plugin stood aside
    (:func:`stood_aside`) and the export observed no wrong read."""
    w = raw["watch"]
    wrong = int(reads["wrong"].sum())
    aside = w.get("state") == "not-applicable" and not w.get("v1_class_changed")
    return {
        "schema": "specrace.watch_check",
        "mode": raw["mode"],
        "config": raw["config"]["name"],
        "vllm_version": raw.get("vllm_version", ""),
        "runner": "v2",
        "state": str(w.get("state", "")),
        "v1_class_changed": list(w.get("v1_class_changed", [])),
        "armed": False,
        "reads_observed": int(len(reads)),
        "reads_watched": 0,
        "steps_watched": 0,
        "steps_skipped": 0,
        "wrong_observed": wrong,
        "wrong_watched": 0,
        "wrong_both": 0,
        "stood_aside": aside,
        "equal": aside and wrong == 0,
    }


def compare(raw: dict[str, Any], reads: pd.DataFrame, step_ids: list[int]) -> dict[str, Any]:
    """The watch's wrong reads of ``raw`` against the export's observed reads (``reads``, whose
    ``step`` indexes ``step_ids``, the engine steps that built inputs)."""
    w = raw["watch"]
    ids = np.asarray(step_ids, dtype=np.int64)
    obs = reads[reads["wrong"]]
    value = obs[consumed_column(raw["mode"])]
    observed = {
        (int(ids[n]), str(r), int(c), int(t))
        for n, r, c, t in zip(obs["step"], obs["req_id"], value, obs["true_count"], strict=True)
    }
    watch = {tuple(x[k] for k in KEYS) for x in w.get("wrong_reads", [])}
    only_watch = sorted(watch - observed)
    only_observed = sorted(observed - watch)
    equal = (
        bool(w.get("armed"))
        and not only_watch
        and not only_observed
        and int(w.get("watch_skipped_steps", 0)) == 0
        and int(w.get("watch_reads", -1)) == len(reads)
    )
    return {
        "schema": "specrace.watch_check",
        "mode": raw["mode"],
        "config": raw["config"]["name"],
        "vllm_version": raw.get("vllm_version", ""),
        **({"patch": raw["patch"]} if raw.get("patch", "none") != "none" else {}),
        "armed": bool(w.get("armed")),
        "reads_observed": int(len(reads)),
        "reads_watched": int(w.get("watch_reads", 0)),
        "steps_watched": int(w.get("watch_steps", 0)),
        "steps_skipped": int(w.get("watch_skipped_steps", 0)),
        "wrong_observed": len(observed),
        "wrong_watched": len(watch),
        "wrong_both": len(watch & observed),
        "only_watch": [list(x) for x in only_watch[:8]],
        "only_observed": [list(x) for x in only_observed[:8]],
        "equal": equal,
    }


def text(rep: dict[str, Any]) -> str:
    if rep.get("runner") == "v2":
        aside = "stood aside" if rep["stood_aside"] else "did NOT stand aside"
        return (f"watch: MRv2, the plugin {aside} (state {rep['state']}); the export saw "
                f"{rep['wrong_observed']} wrong in {rep['reads_observed']} reads")  # fmt: skip
    verdict = "equal" if rep["equal"] else "NOT equal"
    return (
        f"watch: {verdict}: wrong {rep['wrong_watched']} watched, {rep['wrong_observed']} "
        f"observed, {rep['wrong_both']} both; reads {rep['reads_watched']} watched of "
        f"{rep['reads_observed']}; {rep['steps_skipped']} steps skipped"
    )


ROW_KEYS = ("vllm_version", "config", "mode", "patch", "armed", "reads_observed", "reads_watched",
            "steps_watched", "steps_skipped", "wrong_observed", "wrong_watched", "wrong_both",
            "equal", "runner", "state")  # fmt: skip
ROW_DEFAULTS = {"patch": "none", "runner": "v1"}  # a watch.json written before the key was


def rows(root: Path) -> list[dict[str, Any]]:
    """One row per ``watch.json`` under ``root`` (a run folder's ``<pass>/watch.json``, or a
    campaign's ``<run>/<pass>/watch.json``), sorted."""
    out = []
    for path in sorted([*root.glob("*/watch.json"), *root.glob("*/*/watch.json")]):
        rep = json.loads(path.read_text())
        row = {k: rep.get(k, ROW_DEFAULTS.get(k, "")) for k in ROW_KEYS}
        out.append({"run": path.parent.parent.name} | row)
    return out


def markdown(rows: list[dict[str, Any]]) -> str:
    """The watch against the export, one line per pass (``vllm-compare DIR --markdown``)."""
    out = [
        "| vLLM | run | mode | pass | guard | reads (export / watch) | wrong (export / watch / "
        "both) | steps skipped | equal |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        v2 = r["runner"] == "v2"
        verdict = ("not applicable" if v2 else "yes") if r["equal"] else "**no**"
        out.append(
            f"| {r['vllm_version']} | {r['run']} | {r['mode']}{' (MRv2)' if v2 else ''} "
            f"| {r['config']} | {r['patch']} | {r['reads_observed']:,} / {r['reads_watched']:,} "
            f"| {r['wrong_observed']} / {r['wrong_watched']} / {r['wrong_both']} "
            f"| {r['steps_skipped']} | {verdict} |"
        )
    v1 = [r for r in rows if r["runner"] != "v2"]
    bare = [r for r in v1 if r["patch"] == "none"]
    wrong, reads = sum(r["wrong_watched"] for r in bare), sum(r["reads_watched"] for r in bare)
    equal = sum(bool(r["equal"]) for r in v1)
    out.append(f"\nUnguarded passes: the watch saw {wrong} in {reads:,} reads. V1 passes, guarded "
               f"or not: equal to the export in {equal} of {len(v1)}.")  # fmt: skip
    v2 = [r for r in rows if r["runner"] == "v2"]
    if v2:
        aside, seen = sum(bool(r["equal"]) for r in v2), sum(r["wrong_observed"] for r in v2)
        out.append(f"MRv2 passes: the plugin stood aside with no wrong read in {aside} of "
                   f"{len(v2)} (the export saw {seen} wrong).")  # fmt: skip
    return "\n".join(out) + "\n"
