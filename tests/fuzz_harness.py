"""Running a command line in-process and classifying the outcome (see
tests/cli_contract/test_fuzz.py), and the refusals tests/cli_contract/ shares."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

from load import limit_s

from gpu_check.__main__ import main as gpu_main
from sim.cli.main import main

CAMPAIGN = os.environ.get("SPECRACE_FUZZ_CAMPAIGN", "")
# A case over HANG_S is a hang: 60 s, or more on a machine slower now (tests/load.py).
HANG_S = int(os.environ.get("SPECRACE_FUZZ_HANG_S", str(int(max(60, limit_s(15))))))


class Hang(BaseException):
    """Raised by the alarm: not an Exception, so no handler of the CLI can swallow it."""


def run_cli(argv: list[str], prog: Callable = main, cwd: Path | None = None) -> tuple[int, str]:
    """Exit status and stderr of one in-process command, run in ``cwd`` (default: a scratch
    folder, removed after: a relative path a case names never lands in the repository); an
    escaped exception is reported as the traceback Python would print (status 1), a hang as
    status -1."""
    if cwd is None:
        with tempfile.TemporaryDirectory(prefix="specrace-fuzz-") as scratch:
            return run_cli(argv, prog, Path(scratch))
    here = os.getcwd()
    os.chdir(cwd)
    try:
        return _run(argv, prog)
    finally:
        os.chdir(here)


def _run(argv: list[str], prog: Callable) -> tuple[int, str]:
    err = io.StringIO()

    def alarm(_sig, _frame):
        signal.alarm(1)  # again in a second, should a handler on the way swallow this one
        raise Hang

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(HANG_S)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                code = prog(argv)
            except SystemExit as e:  # argparse's own exit, after our one-line error
                code = int(e.code or 0) if not isinstance(e.code, str) else 1
            except Exception:
                print(traceback.format_exc(), file=err)
                code = 1
    except Hang:
        return -1, f"hang: more than {HANG_S} s"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return code, err.getvalue()


def _listing(path: Path) -> dict[str, int]:
    if not path.is_dir():
        return {"": path.stat().st_mtime_ns} if path.exists() else {}
    return {str(p.relative_to(path)): p.stat().st_mtime_ns for p in path.rglob("*")}


def classify(code: int, err: str, out: Path | None, expect: list[Path], watched: dict,
             invalid: bool | None) -> str:  # fmt: skip
    if code == -1:
        return "hang"
    if "Traceback" in err:
        return "traceback"
    if code == 0:
        if invalid:
            return "accepted_invalid"
        whole = all(p.exists() for p in expect) and (out is None or out.is_dir())
        return "ok" if whole else "partial"
    left = out is not None and (
        (out.exists() and out not in watched)
        or (
            out.parent.is_dir()
            and any(p.name.startswith(f".{out.name}.") for p in out.parent.iterdir())
        )
    )
    left = left or any(_listing(d) != before for d, before in watched.items())
    if left:
        return "partial"
    lines = err.strip().splitlines()
    return "clean" if len(lines) == 1 and "error" in lines[0] else "unclear"


def check_case(surface: str, argv: list[str], what: str, out: Path | None = None,
               expect: tuple[Path, ...] = (), watch: tuple[Path, ...] = (),
               invalid: bool | None = None, prog: Callable = main) -> str:  # fmt: skip
    """Run one case and classify it: record it (campaign) or fail on a bad outcome."""
    with tempfile.TemporaryDirectory(prefix="specrace-fuzz-") as scratch:
        cwd = Path(scratch)  # the working directory: a failure must leave it empty too
        watched = {d: _listing(d) for d in (*watch, cwd) if d.is_dir()}
        if out is not None and out.exists():  # an --out given that exists: left as it was
            watched[out] = _listing(out)
        code, err = run_cli(argv, prog, cwd)
        outcome = classify(code, err, out, list(expect), watched, invalid)
    if CAMPAIGN:
        with open(CAMPAIGN, "a") as f:
            f.write(json.dumps({"surface": surface, "outcome": outcome, "case": what[:300],
                                "argv": argv, "stderr": err[-2000:]}) + "\n")  # fmt: skip
        return outcome
    assert outcome in ("ok", "clean"), f"{surface}: {outcome}: {what}\n{' '.join(argv)}\n{err}"
    return outcome


def assert_clean(code: int, err: str, out: Path, what: str) -> None:
    assert classify(code, err, out, [], {}, None) in ("ok", "clean"), f"{what}: {err!r}"


# -- refusals shared by tests/cli_contract/ ------------------------------------------------
def refused(argv: list[str], needle: str, out: Path | None = None, prog=main, watch=()) -> str:
    """Run ``argv``; assert a clean refusal whose one line holds ``needle``."""
    before = {d: sorted(p.name for p in d.rglob("*")) for d in watch}
    code, err = run_cli(argv, prog)
    assert classify(code, err, out, [], {}, True) == "clean", (argv, code, err)
    assert needle in err, err
    assert {d: sorted(p.name for p in d.rglob("*")) for d in watch} == before
    return err


def run_schedule(tmp_path: Path, sched: dict | bytes, needle: str) -> None:
    path = tmp_path / "bad.json"
    if isinstance(sched, bytes):
        path.write_bytes(sched)
    else:
        path.write_text(json.dumps(sched))
    out = tmp_path / "o"
    refused(["run", "--schedule", str(path), "--out", str(out)], needle, out)
    refused(["replay", "--device", "cpu", "--schedule", str(path), "--out", str(out)], needle,
            out, prog=gpu_main)  # fmt: skip
