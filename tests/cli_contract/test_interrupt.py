"""Ctrl-C at any moment of a command with worker processes: one line, exit 130, nothing left.

Each command starts in a session of its own and SIGINT goes to its whole process group, as a
terminal's Ctrl-C does (and ``timeout -s INT``): the command, the fork server and every worker
get it. It goes at a fixed time after the start (0.3 s: the interpreter importing; 1 s: the
fork server starting and importing; 2.5 s: the workers running) or once the command's first
output appears (a line on stdout, or a sweep's first point file: for ``risk`` that is when it
prints its report and writes ``--report``). The command must then print exactly its one line
on stderr (no traceback from a child), exit with 130, leave no process of its group and no
output (a sweep leaves the points it finished, each whole, to resume from). The exit comes in
well under 2 s on the idle machine (the campaign below measures it); the limit asserted is
scaled for a busy one (tests/load.py).

The children start with SIGINT at its default, as a terminal's foreground command has it (a
suite started as a background job inherits SIGINT ignored: tests/cli_contract/test_boundary.py).

``python tests/cli_contract/test_interrupt.py [N]``: the campaign, each command interrupted N (13)
times at delays spread over its run, with the worst exit time of each.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

if __name__ == "__main__":  # the campaign, run as a script: tests/'s helpers, as pytest has them
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from load import limit_s  # noqa: E402
from repo_root import ROOT  # noqa: E402

PY = sys.executable
SPECRACE = Path(sys.executable).with_name("specrace")  # the console script beside it


@dataclass(frozen=True)
class Command:
    """A command with worker processes, at a size that runs several seconds."""

    name: str
    argv: Callable[[Path], list[str]]  # given an empty folder for its outputs
    line: str  # its one line on stderr
    first: Callable[[Path, list[str]], bool]  # its first output has appeared (folder, stdout)
    left_ok: Callable[[Path], str] = field(default=lambda tmp: _nothing(tmp))  # "" or a fault


def _nothing(tmp: Path) -> str:
    left = sorted(p.name for p in tmp.iterdir())
    return f"left {left}" if left else ""


def _a_line(_tmp: Path, out: list[str]) -> bool:
    return bool(out)


def _a_point(tmp: Path, _out: list[str]) -> bool:
    points = tmp / "sw" / "points"
    return points.is_dir() and any(p.suffix == ".jsonl" for p in points.iterdir())


def _sweep_whole(tmp: Path) -> str:
    """A sweep keeps what it finished (it resumes from it): only whole files, no temporary."""
    out = tmp / "sw"
    others = sorted(p.name for p in tmp.iterdir() if p != out)
    if others:
        return f"left {others}"
    for path in out.rglob("*") if out.exists() else ():
        if path.name.endswith(".tmp"):
            return f"left a temporary {path}"
        if path.suffix == ".jsonl":
            try:
                for line in path.read_text().splitlines():
                    json.loads(line)
            except ValueError as e:
                return f"{path} is not whole: {e}"
    return ""


def _risk(tmp: Path) -> list[str]:
    return ["risk", "--vllm", "0.28.0", "--model", "qwen3.5-27b", "--spec", "mtp:3",
            "--gpu-timing", "balanced", "--seeds", "16", "--workers", "2",
            "--report", str(tmp / "r.html")]  # fmt: skip


def _sweep(tmp: Path) -> list[str]:
    return ["sweep", "--vary", "timing.dma_land_delay_ns=10000,30000", "--seeds", "12",
            "--steps", "1500", "--workers", "2", "--quiet", "--out", str(tmp / "sw")]  # fmt: skip


def _check(tmp: Path) -> list[str]:
    return ["check", "--max-rows", "3", "--sync-classes", "p,h", "--workers", "2",
            "--out", str(tmp / "check.json")]  # fmt: skip


def _stream(tmp: Path) -> list[str]:
    return ["run", "--stream", "--policy", "align", "--workers", "2", "--steps", "200000",
            "--out", str(tmp / "run")]  # fmt: skip


SIM = [PY, "-m", "sim"]
LINE = "error: interrupted"
COMMANDS = {
    c.name: c
    for c in [
        Command("risk", lambda t: [*SIM, *_risk(t)], LINE, _a_line),
        Command("specrace risk", lambda t: [str(SPECRACE), *_risk(t)], LINE, _a_line),
        Command("sweep", lambda t: [*SIM, *_sweep(t)], LINE, _a_point, _sweep_whole),
        Command("check", lambda t: [*SIM, *_check(t)], LINE, _a_line),
        Command("run --stream", lambda t: [*SIM, *_stream(t)], LINE, _a_line),
    ]
}


@dataclass
class Outcome:
    code: int | None
    stdout: list[str]
    stderr: str
    exit_s: float  # from SIGINT to the command's exit
    gone_s: float | None  # from SIGINT to the last process of its group gone (None: not gone)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _group_gone(pgid: int, deadline: float) -> bool:
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.01)
    return False


def interrupt(cmd: Command, tmp: Path, when: float | None) -> Outcome:
    """Start ``cmd`` in a session of its own, send SIGINT to its group ``when`` seconds later
    (None: once its first output appears) and wait for it and its processes to go."""
    p = subprocess.Popen(cmd.argv(tmp), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True, preexec_fn=_default_sigint)  # fmt: skip
    assert p.stdout is not None and p.stderr is not None
    out: list[str] = []
    err: list[str] = []
    readers = [threading.Thread(target=lambda f=f, to=to: to.extend(f), daemon=True)
               for f, to in ((p.stdout, out), (p.stderr, err))]  # fmt: skip
    for r in readers:
        r.start()
    try:
        if when is not None:
            time.sleep(when)
        else:
            deadline = time.monotonic() + limit_s(30)
            while not cmd.first(tmp, out) and p.poll() is None:
                assert time.monotonic() < deadline, f"{cmd.name}: no output"
                time.sleep(0.005)
        sent = time.monotonic()
        os.killpg(p.pid, signal.SIGINT)
        try:
            p.wait(limit_s(5))
        except subprocess.TimeoutExpired:  # hung: killed below
            return Outcome(None, out, "".join(err), float("inf"), None)
        exit_s = time.monotonic() - sent
        gone = _group_gone(p.pid, time.monotonic() + limit_s(10))
        for r in readers:
            r.join(limit_s(5))
        return Outcome(p.returncode, out, "".join(err), exit_s,
                       time.monotonic() - sent if gone else None)  # fmt: skip
    finally:
        with contextlib.suppress(ProcessLookupError):  # a failure above: nothing left of it
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def faults(cmd: Command, tmp: Path, o: Outcome) -> list[str]:
    bad = []
    if o.code is None:
        bad.append(f"still running {limit_s(5):.0f} s after SIGINT")
    elif o.code != 130:
        bad.append(f"exit status {o.code}")
    if o.stderr != cmd.line + "\n":
        bad.append(f"stderr {o.stderr!r}")
    if o.gone_s is None:
        bad.append("a process of its group was left")
    left = cmd.left_ok(tmp)
    if left:
        bad.append(left)
    return bad


# specrace risk is risk through the console script: its start (0.3 s) and its workers (2.5 s)
CASES = [(name, when) for name in COMMANDS for when in (0.3, 1.0, 2.5, None)
         if name != "specrace risk" or when in (0.3, 2.5)]  # fmt: skip


@pytest.mark.skipif(not hasattr(os, "killpg") or not Path("/proc").is_dir(),
                    reason="process groups (POSIX)")  # fmt: skip
@pytest.mark.parametrize(("name", "when"), CASES,
                         ids=[f"{n}-{'first-output' if w is None else f'{w}s'}"
                              for n, w in CASES])  # fmt: skip
def test_ctrl_c(tmp_path: Path, name: str, when: float | None) -> None:
    cmd = COMMANDS[name]
    if cmd.argv(tmp_path)[0] == str(SPECRACE) and not SPECRACE.exists():
        pytest.skip("the specrace console script is not installed beside this Python")
    o = interrupt(cmd, tmp_path, when)
    assert faults(cmd, tmp_path, o) == [], (o.stdout[:3], o.stderr)


# -- the pool's way out, in this process ----------------------------------------------------------
def test_a_caller_that_stops_early_has_the_workers_killed_not_waited_for() -> None:
    import multiprocessing

    from sim.runs.processes import iter_units

    units = iter_units(time.sleep, [0, 60, 60], workers=2)
    assert next(units) is None
    t = time.monotonic()
    units.close()  # as when the caller is interrupted, or stops at a result
    assert time.monotonic() - t < limit_s(2)
    assert multiprocessing.active_children() == []


def test_a_worker_that_dies_breaks_the_pool_here() -> None:
    from concurrent.futures.process import BrokenProcessPool

    from sim.runs.processes import map_units

    with pytest.raises(BrokenProcessPool, match="exit code 3"):
        map_units(os._exit, [3, 3], workers=2)


def test_after_stop_all_a_pool_starts_a_fork_server_again() -> None:
    from multiprocessing import forkserver

    from sim.runs.processes import map_units, stop_all

    assert map_units(abs, [-1, 2, -3], workers=2) == [1, 2, 3]
    stop_all()
    assert forkserver._forkserver._forkserver_pid is None
    assert map_units(abs, [-4, 5, -6], workers=2) == [4, 5, 6]


# -- Ctrl-C while importing, and the status after a caught one -----------------------------------
@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="signal masks (POSIX)")
def test_a_ctrl_c_inside_a_held_block_is_taken_as_it_ends_not_inside() -> None:
    """With Python's own handler installed, as a foreground `python` has it. A suite started
    as a background job of a shell without job control inherits SIGINT ignored, and Python
    then installs no handler: the test sets it, and puts back what it found."""
    from sim.runs.ctrl_c import sigint_held

    found = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        reached = []
        with pytest.raises(KeyboardInterrupt), sigint_held():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # delivered now, were it not held: a KeyboardInterrupt here
            reached.append("the end of the block")
        assert reached == ["the end of the block"]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, found)


def test_a_ctrl_c_caught_in_a_string_exec_keeps_the_status_the_program_chose(
    tmp_path: Path,
) -> None:
    """The CPython behaviour behind an `exit status -2` CI saw once in 60 interrupts of a
    sweep: a KeyboardInterrupt that ended a string exec, though caught, makes `python -m`
    exit by SIGINT. keep_exit_status(), as sim/__main__.py calls it, keeps 130."""
    body = 'try:\n    exec("raise KeyboardInterrupt")\nexcept KeyboardInterrupt:\n    pass\n'
    (tmp_path / "caught.py").write_text(body + "raise SystemExit(130)\n")
    (tmp_path / "kept.py").write_text(
        body + "from sim.runs.ctrl_c import keep_exit_status\nkeep_exit_status()\n"
        "raise SystemExit(130)\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}

    def status(mod: str) -> int:
        return subprocess.run([PY, "-m", mod], env=env, cwd=tmp_path).returncode

    assert status("kept") == 130
    # the behaviour it guards against, where this Python has it (3.11-3.13 do)
    assert status("caught") in (130, -signal.SIGINT)


def campaign(times: int = 13) -> int:
    """Each command interrupted ``times`` times at delays spread from 0.05 s to 4 s and once
    its first output appears; prints the worst exit time of each. 1 if any run failed."""
    import tempfile

    delays: list[float | None] = [0.05 + i * 3.95 / max(1, times - 2) for i in range(times - 1)]
    delays.append(None)
    failed = 0
    for cmd in COMMANDS.values():
        exits, gones, bad = [], [], []
        for when in delays:
            with tempfile.TemporaryDirectory() as d:
                o = interrupt(cmd, Path(d), when)
                f = faults(cmd, Path(d), o)
            exits.append(o.exit_s)
            gones.append(o.gone_s if o.gone_s is not None else float("inf"))
            if f:
                bad.append(f"{'first output' if when is None else f'{when:.2f} s'}: {f}")
        failed += bool(bad)
        print(f"{cmd.name:14} {len(delays)} interrupts: worst exit {max(exits):.2f} s (median "
              f"{sorted(exits)[len(exits) // 2]:.2f} s), all processes gone within "
              f"{max(gones):.2f} s, {len(bad)} failed", flush=True)  # fmt: skip
        for b in bad:
            print(f"  {b}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(campaign(int(sys.argv[1]) if len(sys.argv) > 1 else 13))


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="POSIX signals")
@pytest.mark.parametrize("retake", [True, False])
def test_a_ctrl_c_landing_in_a_callback_is_taken_again_not_lost(retake: bool) -> None:
    """The flake CI saw as `specrace risk` still running 20 s after Ctrl-C: the interrupt
    landed in an import lock's weakref callback, where Python can only print it. With the
    entry points' hook it comes back in the main flow; without it, it is lost (the case this
    guards against, so the test can tell the two apart)."""
    code = f"""
import os, signal, sys, time, weakref
from sim.runs.ctrl_c import retake_swallowed_interrupts
if {retake}:
    retake_swallowed_interrupts()
class A: pass
def callback(_ref):
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.01)  # the handler runs here, inside the callback
a = A(); ref = weakref.ref(a, callback)
try:
    del a
    time.sleep(2)
    print("ran on")
except KeyboardInterrupt:
    print("interrupted")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=limit_s(30), cwd=ROOT)  # fmt: skip
    assert done.stdout.strip() == ("interrupted" if retake else "ran on"), done.stderr


def test_the_retaking_hook_installs_once(monkeypatch) -> None:
    """Installed twice (two entry points in one process), it would ask for each Ctrl-C twice."""
    from sim.runs.ctrl_c import retake_swallowed_interrupts

    monkeypatch.setattr(sys, "unraisablehook", sys.__unraisablehook__)
    retake_swallowed_interrupts()
    first = sys.unraisablehook
    retake_swallowed_interrupts()
    assert sys.unraisablehook is first is not sys.__unraisablehook__
