"""Every notebook runs top to bottom in a real Jupyter kernel (nbclient), as a user runs it.

A code cell tagged ``figure`` must display an image (``image/png``); one tagged ``widget``
must display an ipywidgets view; and each notebook must print the claims it exists to show.
The kernel imports ``sim`` from this checkout (PYTHONPATH), not from an installed copy.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from load import limit_s
from repo_root import ROOT

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

# What each notebook must print: the claims it exists to show.
EXPECT = {
    "explore_timing.ipynb": [
        "R consumes 4 (true 1), kind='ownership'",
        "delay=     0 ns: R consumes 1 (true 1)",
        "delay= 60000 ns: R consumes 1 (true 1)",
        "synced-gather: R at step 4, row 0 (row 1 at step 3): read 4, true 1, GDN consumed 4",
        "device-authoritative: gpu_wrong=0",
    ],
    "validate_replay.ipynb": [
        "landing positions that corrupted R: ['before swap 1↔0']",
        "policies that corrupted R: ['align', 'synced-gather', 'unsynced']",
    ],
    "your_vllm.ipynb": [
        "vLLM 0.28.0: RACY path -> policy align",
        "vLLM 0.27.1: safe path -> policy device-authoritative",
        "vLLM 0.34.0: safe path -> policy mrv2",
        "exposure over plausible host speeds: EXPOSED",
        "cheapest safe change: PR #51599",
        "-> WRONG (",
    ],
}
# Figure cells each notebook must have at least (a cell that stops drawing fails the test).
MIN_FIGURES = {"explore_timing.ipynb": 6, "validate_replay.ipynb": 1, "your_vllm.ipynb": 2}


def _text(outputs: list) -> str:
    parts = []
    for o in outputs:
        if o.get("output_type") == "stream":
            parts.append(o.get("text", ""))
        elif o.get("output_type") in ("execute_result", "display_data"):
            parts.append(o.get("data", {}).get("text/plain", ""))
    return "".join(parts)


def _execute(path: Path):
    """The executed notebook, by a client that reads a reply it has been sent within half a
    second even when its socket's wake-up is lost (tests/notebook_client.py: before, such a
    reply waited out the cell's time limit, 60-180 s of the suite). A kernel that still does
    not answer within a cell's time limit (what the slowest cell takes on the idle machine,
    3.5-4.1 s, data/bench/waits/notebooks-2026-12-03.jsonl, with room and scaled by the load:
    tests/load.py) or dies is started afresh once. An error in a cell is never retried: it
    fails the test at once."""
    from nbclient.exceptions import CellTimeoutError, DeadKernelError
    from notebook_client import NotebookClient

    for attempt in (1, 2):
        nb = nbformat.read(path, as_version=4)
        client = NotebookClient(
            nb, timeout=int(limit_s(20)), kernel_name="python3",
            resources={"metadata": {"path": str(path.parent)}},
        )  # fmt: skip
        try:
            client.execute()
            return nb
        except (CellTimeoutError, DeadKernelError):
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_the_committed_notebook_holds_its_outputs(path: Path) -> None:
    """Stored as run (`make notebooks`), so its figures show where it is read, GitHub included:
    every code cell ran, in order, and every figure cell holds its image."""
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), path.name
    for i, cell in enumerate(code):
        if "figure" in cell.metadata.get("tags", []):
            kinds = {k for o in cell.outputs for k in o.get("data", {})}
            assert "image/png" in kinds, f"{path.name} code cell {i}: no stored image"
    assert not [o for c in code for o in c.outputs if o.get("output_type") == "error"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_in_a_kernel(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel picks its inline backend
    nb = _execute(path)
    code = [c for c in nb.cells if c.cell_type == "code"]
    errors = [o for c in code for o in c.outputs if o.get("output_type") == "error"]
    assert not errors, errors
    figures = 0
    for i, cell in enumerate(code):
        tags = cell.metadata.get("tags", [])
        kinds = {k for o in cell.outputs for k in o.get("data", {})}
        if "figure" in tags:
            assert "image/png" in kinds, f"{path.name} code cell {i} drew no image: {kinds}"
            figures += 1
        if "widget" in tags:
            assert "application/vnd.jupyter.widget-view+json" in kinds, (path.name, i, kinds)
    assert figures >= MIN_FIGURES[path.name]
    out = "".join(_text(c.outputs) for c in code)
    for needle in EXPECT[path.name]:
        assert needle in out, needle


def test_every_notebook_has_expectations() -> None:
    assert NOTEBOOKS and {p.name for p in NOTEBOOKS} == set(EXPECT)


def test_a_reply_left_unread_by_a_lost_wake_up_is_read_within_a_slice() -> None:
    """The sliced wait (tests/notebook_client.py) over a channel whose poll, like pyzmq's after
    a lost wake-up, sees nothing until its own timeout although the reply is there: the reply
    comes back within about one slice, not at the whole wait's limit; with no reply the wait
    still ends with ``Empty`` at its limit, and a wait with no limit keeps polling."""
    import asyncio
    import time
    from queue import Empty

    from notebook_client import SLICE_S, _sliced

    class LostWakeUp:
        """A reply is there from ``ready_at``; a poll sees it only when its timeout ends."""

        def __init__(self, ready_at: float) -> None:
            self.ready_at, self.polls = ready_at, 0

        async def get_msg(self, timeout: float | None = None) -> dict:
            self.polls += 1
            await asyncio.sleep(timeout if timeout is not None else 3600)
            if time.monotonic() >= self.ready_at:
                return {"msg": "reply"}
            raise Empty

    t0 = time.monotonic()
    ch = LostWakeUp(t0 + 0.2)
    assert asyncio.run(_sliced(ch.get_msg)(timeout=30)) == {"msg": "reply"}
    assert time.monotonic() - t0 < 0.2 + 2 * SLICE_S and ch.polls >= 1
    t0 = time.monotonic()
    never = LostWakeUp(float("inf"))
    with pytest.raises(Empty):
        asyncio.run(_sliced(never.get_msg)(timeout=1.2))
    assert 1.2 <= time.monotonic() - t0 < 1.2 + SLICE_S and never.polls >= 3
    t0 = time.monotonic()
    later = LostWakeUp(t0 + 1.1)
    assert asyncio.run(_sliced(later.get_msg)(timeout=None)) == {"msg": "reply"}
    assert later.polls >= 3


def test_stored_notebooks_get_stable_widget_ids() -> None:
    """`make notebooks` renumbers the widgets' random model ids by first appearance, so a rerun
    gives the same bytes; a 64-digit hash (a signature) is left whole."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "run_notebooks", ROOT / "scripts" / "run_notebooks.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    a, b, sig = "9b5280105b6a43229d202336102122e2", "188cd116c6b543d7b850bd8587b94e51", "ab" * 32
    text = f'"model_id": "{b}", "IPY_MODEL_{a}", "{b}", "{sig}"'
    assert mod.stable_ids(text) == (f'"model_id": "{1:032x}", "IPY_MODEL_{a}", "{1:032x}", "{sig}"')
