"""Every command that writes, against every shape of a user's files at its output (538a6fb).

One table (:data:`WRITERS`) names each command that writes, with the smallest arguments that
make it write; :func:`test_every_writer_is_in_the_table` fails when a subcommand with an output
(``--out``, ``--report``, ``--force``, an output positional) is missing from it. Each writer
then meets each planted shape (:data:`DIR_SHAPES`, :data:`FILE_SHAPES`), with and without
``--force`` where it has one, and the same rules must hold every time:

- every byte of the user's files is where it was (a snapshot of every file under the case's
  folder, less what specrace itself wrote there, before and after);
- a refusal is exactly one line on stderr (``error: ...``, ``gpu_check: error: ...``), a
  non-zero status, no traceback, and changes nothing: the folder's listing is as it was;
- where the output is plainly the user's (a folder of their files, a link to one, a file they
  made or edited, an older specrace's output), the command refuses.

:func:`test_a_file_added_while_the_command_runs` adds a user's file at the output while the
command runs: the command refuses at the end, leaves its finished output beside it (``.new-``
in the name, named in the message), and the user's file is as they wrote it.

Known data loss would be held as strict xfails (:data:`KNOWN`, empty today).

Kept fast (under a minute on 2 cores with ``-n 2``): minimal-race, 4 steps, one worker, no
trace; the inputs a writer reads are made once per process (:func:`inputs`).
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from fuzz_harness import run_cli
from repo_root import ROOT

from gpu_check.__main__ import build_parser as gpu_parser
from gpu_check.__main__ import main as gpu_main
from sim.cli.main import build_parser as sim_parser
from sim.cli.main import main as sim_main
from sim.runs.outputs import MARKER, record, sha256, write_marker

VLLM = ROOT / "data" / "vllm"
RAW = VLLM / "v0.24.0" / "raw" / "raw_align_s16_d15ms.json.gz"
EVENT_LAG = ROOT / "data" / "bench" / "event_lag"
EXPORTED = VLLM / "v0.24.0" / "align_s16_d15ms"  # an exported run (vllm-figure's input)
COMMITTED = VLLM / "v0.23.0"  # a committed vllm-run folder (kind vllm-run), 2.4 MB
MRV2 = VLLM / "v0.33.0-mrv2"  # a committed MRv2 vllm-run folder, 128 kB
PREREG = VLLM / "preregistered" / "ab-45100" / "predictions.json"
SMALL = ["--scenario", "minimal-race", "--steps", "4"]
RUN = ["run", *SMALL, "--policy", "align", "--no-trace"]
ERROR_LINE = re.compile(r"^(gpu_check: )?error: \S")


# -- the inputs writers read, made once per process ------------------------------------------------
_INPUTS: dict[str, Path] = {}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    """A run with a trace (report, plot, timeline, shrink, perfetto), an exported run with its
    async-off reference (vllm-consequence): read only, never written by a case."""
    if not _INPUTS:
        root = tmp_path_factory.mktemp("inputs")
        run = root / "run"
        code, err = run_cli(["run", "--scenario", "minimal-race", "--policy", "align", "--steps",
                             "8", "--out", str(run)], sim_main)  # fmt: skip
        assert code == 0, err
        cq = root / "cq" / "v0.23.0"
        shutil.copytree(VLLM / "ab" / "gdn-bit" / "v0.23.0" / "raw", cq / "raw")
        code, err = run_cli(["vllm-export", str(cq / "raw" / "raw_none_s64_d20ms.json.gz"),
                             "--out", str(cq / "none_s64_d20ms")], gpu_main)  # fmt: skip
        assert code == 0, err
        _INPUTS.update(run=run, cq=cq)
    return _INPUTS


# -- the table of writers --------------------------------------------------------------------------
@dataclass(frozen=True)
class Writer:
    """A command that writes. ``argv(inputs, out)``: its arguments writing at ``out``; ``out``:
    "dir" (a folder written whole), "into" (files written into a folder), "file" (one file);
    ``kind``: the marker kind of its folder; ``suffix``: its file's; ``fixed``: a writer whose
    file's place is fixed inside a folder the case makes (``place(inputs, case) -> file``)."""

    cli: str  # "sim" or "gpu_check"
    command: str
    argv: Callable[[dict, Path], list[str]]
    out: str
    force: bool = False
    kind: str = ""
    suffix: str = ""
    place: Callable[[dict, Path], Path] | None = None
    cwd_root: bool = False  # reads data/... relative to the repository
    cuda: bool = False  # its work needs CUDA: here it gets as far as its output's checks

    @property
    def prog(self) -> Callable:
        return sim_main if self.cli == "sim" else gpu_main


def _copy_run(i: dict, case: Path) -> Path:
    run = case / "run"
    shutil.copytree(i["run"], run)
    return run / "trace.perfetto.json"


def _prereg(i: dict, case: Path) -> Path:
    folder = case / "prereg"
    folder.mkdir()
    shutil.copy(PREREG, folder / "predictions.json")
    return folder / "outcome.json"


def mrv2_watch_run(out: Path) -> None:
    """The committed MRv2 run folder as ``vllm-run --watch`` leaves it: its raw record carries
    the plugin's stood-aside record, so ``vllm-export`` writes ``watch.json`` in its pass
    folder (``export_v2``), the MRv2 path beside V1's."""
    shutil.copytree(MRV2, out)
    raw = out / "raw" / "raw_align_s16_d0ms.json.gz"
    doc = json.loads(gzip.decompress(raw.read_bytes()))
    doc["watch"] = {"state": "not-applicable", "armed": False, "v1_class_changed": []}
    raw.write_bytes(gzip.compress(json.dumps(doc).encode(), mtime=0))


def _plan_folder(i: dict, case: Path) -> Path:
    (case / "o").mkdir()
    return case / "o" / "predictions.json"


WRITERS: dict[str, Writer] = {
    # sim
    "run": Writer("sim", "run", lambda i, o: [*RUN, "--out", str(o)], "dir", True, "run"),
    "run --stream": Writer("sim", "run", lambda i, o: [
        "run", "--stream", *SMALL, "--policy", "align", "--workers", "1", "--out", str(o)],
        "dir", True, "run"),
    "schedule": Writer("sim", "schedule", lambda i, o: ["schedule", *SMALL, "--out", str(o)],
                       "dir", True, "schedule"),
    "sweep": Writer("sim", "sweep", lambda i, o: [
        "sweep", *SMALL, "--policy", "align", "--vary", "timing.dma_land_delay_ns=1,2",
        "--workers", "1", "--quiet", "--out", str(o)], "into", kind="sweep"),
    "field-reports": Writer("sim", "field-reports", lambda i, o: [
        "field-reports", "--only", "vllm#45100", "--seeds", "1", "--out", str(o)], "into",
        kind="field-reports"),
    "report": Writer("sim", "report", lambda i, o: ["report", str(i["run"]), "--out", str(o)],
                     "file", suffix=".html"),
    "risk --report": Writer("sim", "risk", lambda i, o: [
        "risk", "--vllm", "0.28.0", "--gpu-timing", "balanced", "--seeds", "1", "--steps", "50",
        "--workers", "1", "--no-mitigations", "--report", str(o)], "file", suffix=".html"),
    "plot": Writer("sim", "plot", lambda i, o: ["plot", str(i["run"]), "--out", str(o)], "file",
                   suffix=".png"),
    "timeline": Writer("sim", "timeline", lambda i, o: [
        "timeline", str(i["run"]), "--out", str(o.with_suffix(""))], "file", suffix=".png"),
    "perfetto": Writer("sim", "perfetto", lambda i, o: ["perfetto", str(o.parent)], "file",
                       suffix=".json", place=_copy_run),
    "shrink": Writer("sim", "shrink", lambda i, o: [
        "shrink", str(i["run"]), "--step", "4", "--req", "R", "--out", str(o)], "file",
        suffix=".toml"),
    "check --out": Writer("sim", "check", lambda i, o: [
        "check", "--max-rows", "1", "--steps", "2", "--workers", "1", "--out", str(o)], "file",
        suffix=".json"),
    "upstream-test": Writer("sim", "upstream-test", lambda i, o: [
        "upstream-test", "--vllm", "0.24.0", "--out", str(o)], "file", suffix=".py"),
    # gpu_check
    "replay": Writer("gpu_check", "replay", lambda i, o: [
        "replay", "--device", "cpu", "--steps", "4", "--out", str(o)], "dir", True, "replay"),
    "vllm-export": Writer("gpu_check", "vllm-export", lambda i, o: [
        "vllm-export", str(RAW), "--out", str(o)], "dir", kind="vllm-export"),
    # folder mode: writes the exports and tables into the vllm-run folder it is given
    "vllm-export DIR": Writer("gpu_check", "vllm-export", lambda i, o: ["vllm-export", str(o)],
                              "into", kind="vllm-run"),
    # the same on an MRv2 run recorded with --watch: export_v2 writes watch.json per pass
    "vllm-export DIR MRv2": Writer("gpu_check", "vllm-export", lambda i, o: [
        "vllm-export", str(o)], "into", kind="vllm-run"),
    "vllm-forward": Writer("gpu_check", "vllm-forward", lambda i, o: [
        "vllm-forward", str(VLLM), "--seeds", "1", "--out", str(o)], "into",
        kind="vllm-forward"),
    # vllm-plan writes one signed file, FOLDER/predictions.json, once (never replaced): a file
    # writer whose folder may be anyone's
    "vllm-plan": Writer("gpu_check", "vllm-plan", lambda i, o: [
        "vllm-plan", "--vllm", "0.24.0", "--modes", "align", "--configs", "16:0",
        "--num-requests", "16", "--seeds", "1", "--out", str(o.parent)], "file",
        suffix=".json", place=_plan_folder, cwd_root=True),
    "vllm-outcome": Writer("gpu_check", "vllm-outcome", lambda i, o: [
        "vllm-outcome", str(o.parent), "--runs", str(VLLM / "ab")], "file", True,
        suffix=".json", place=_prereg),
    "vllm-repeatability": Writer("gpu_check", "vllm-repeatability", lambda i, o: [
        "vllm-repeatability", str(VLLM / "forward-24" / "v0.33.0-k4-staggered"), "--out",
        str(o)], "into", kind="vllm-repeatability"),
    "vllm-gauge": Writer("gpu_check", "vllm-gauge", lambda i, o: [
        "vllm-gauge", str(VLLM / "v0.24.0"), "--out", str(o)], "into", kind="vllm-gauge"),
    "vllm-ab": Writer("gpu_check", "vllm-ab", lambda i, o: [
        "vllm-ab", str(VLLM / "ab"), str(VLLM / "fixes"), "--out", str(o)], "file",
        suffix=".json"),
    "vllm-consequence": Writer("gpu_check", "vllm-consequence", lambda i, o: [
        "vllm-consequence", str(i["cq"]), "--out", str(o)], "file", suffix=".json"),
    # the summary again from a measured folder's table (no CUDA): the import of a device's
    "event-lag": Writer("gpu_check", "event-lag", lambda i, o: [
        "event-lag", str(EVENT_LAG), "--out", str(o)], "into", kind="event-lag"),
    "vllm-figure": Writer("gpu_check", "vllm-figure", lambda i, o: [
        "vllm-figure", str(EXPORTED), "--out", str(o)], "file", suffix=".png"),
    # CUDA only: each checks its --out before anything else, so every refusal is tested here;
    # where it would write, it stops with one line on the missing device.
    "calibrate": Writer("gpu_check", "calibrate", lambda i, o: ["calibrate", "--out", str(o)],
                        "into", kind="calibrate", cuda=True),
    "bench": Writer("gpu_check", "bench", lambda i, o: ["bench", "--out", str(o)], "into",
                    kind="bench", cuda=True),
    "event-lag --measure": Writer("gpu_check", "event-lag", lambda i, o: [
        "event-lag", "--out", str(o)], "into", kind="event-lag", cuda=True),
    "vllm-run": Writer("gpu_check", "vllm-run", lambda i, o: ["vllm-run", "--out", str(o)],
                       "into", kind="vllm-run", cuda=True),
    "vllm-plugin-bench": Writer("gpu_check", "vllm-plugin-bench", lambda i, o: [
        "vllm-plugin-bench", "--out", str(o)], "into", kind="vllm-plugin-bench", cuda=True),
}  # fmt: skip

# Subcommands that write nothing (no --out, --report, --force or output positional): each
# prints to stdout only. Listed so that a new command must be placed in one list or the other.
READ_ONLY = {
    "sim": {"compare", "params",
            "bench"},  # timings on stdout; --sweep/--waits time in temporary folders
    "gpu_check": {"recall", "padding", "summary", "vllm-compare"},
}  # fmt: skip
# Output positionals the parsers cannot tell from inputs: the command writes into DIR.
POSITIONAL_OUTPUT = {("sim", "perfetto"), ("gpu_check", "vllm-outcome"),
                     ("gpu_check", "vllm-export")}  # fmt: skip


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def test_every_writer_is_in_the_table() -> None:
    """Covered by construction: a subcommand with an output is in WRITERS, else in READ_ONLY."""
    tabled = {(w.cli, w.command) for w in WRITERS.values()}
    for cli, parser in (("sim", sim_parser()), ("gpu_check", gpu_parser())):
        for name, sub in _subparsers(parser).items():
            flags = {o for a in sub._actions for o in a.option_strings}
            writes = bool(flags & {"--out", "--report", "--force"})
            writes = writes or (cli, name) in POSITIONAL_OUTPUT
            if writes:
                assert (cli, name) in tabled, f"{cli} {name} writes but is not in WRITERS"
                assert name not in READ_ONLY[cli], f"{cli} {name}: in READ_ONLY but writes"
            else:
                assert name in READ_ONLY[cli] or (cli, name) in tabled, (
                    f"{cli} {name}: not in WRITERS nor READ_ONLY: say whether it writes"
                )
    for cli, name in tabled:
        assert name in _subparsers(sim_parser() if cli == "sim" else gpu_parser()), name


# -- planted shapes --------------------------------------------------------------------------------
def png(path: Path, color: str = "red") -> None:
    """A PNG a user made with matplotlib: no specrace signature."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1, 1))
    ax.plot([0, 1], [1, 0], color=color)
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    path.write_bytes(buf.getvalue())


def user_folder(d: Path) -> None:
    (d / "sub").mkdir(parents=True, exist_ok=True)
    (d / "notes.txt").write_text("my notes\n")
    (d / "model.py").write_text("x = 1\n")
    (d / "sub" / "data.csv").write_text("a,b\n1,2\n")


def fake_ours(out: Path, kind: str) -> None:
    """A specrace output of ``kind`` as the commands that need CUDA would leave it."""
    out.mkdir(parents=True)
    write_marker(out, kind)
    (out / "result.json").write_text('{"ok": 1}\n')
    record(out, "result.json", sha256(out / "result.json"))


def make_ours(w: Writer, i: dict, case: Path, out: Path) -> None:
    """A real output of ``w`` at ``out``, as a previous run left it."""
    if w.cuda:
        return fake_ours(out, w.kind)
    if w is WRITERS["vllm-export DIR MRv2"]:  # exported once with its watch.json: ours
        mrv2_watch_run(out)
        code, err = run(w, i, case, out)
        assert code == 0 and (out / "align_s16_d0ms" / "watch.json").is_file(), err
        return
    if w.command == "vllm-export" and w.out == "into":
        shutil.copytree(COMMITTED, out)
        return
    code, err = run(w, i, case, out)
    assert code == 0, f"the first run of {w.command}: {err}"


def run(w: Writer, i: dict, case: Path, out: Path) -> tuple[int, str]:
    return run_cli(w.argv(i, out), w.prog, ROOT if w.cwd_root else case)


def plant_dir(shape: str, w: Writer, i: dict, case: Path, out: Path) -> bool:
    """Plant ``shape`` at the folder output ``out``; returns whether the command must refuse."""
    if shape == "user-folder":
        user_folder(out)
        return True
    if shape == "fake-meta":  # cause #1 of the audit: a meta.json was taken for a run's
        out.mkdir(parents=True)
        (out / "meta.json").write_text(json.dumps({"scenario": "minimal-race", "policy": "x"}))
        png(out / "photos" / "cat.png")
        return True
    if shape == "named-like-ours":  # a real output, and the user's files named like ours in it
        make_ours(w, i, case, out)
        png(out / "diagram.png", "blue")
        (out / "draft.tmp").write_text("draft")
        (out / "project-meta.json").write_text('{"mine": true}')
        (out / "sub").mkdir(exist_ok=True)
        (out / "sub" / "my_reads.parquet").write_bytes(b"PAR1 mine PAR1")
        (out / "agreement.docx").write_bytes(b"PK\x03\x04 signed")
        return w.out == "dir"  # a folder written whole holds nothing else
    if shape == "backup-beside":  # .o.20241205.old has the form of our temporaries' names
        old = out.parent / f".{out.name}.20241205.old"
        make_ours(w, i, case, old)
        (old / "thesis.txt").write_text("chapter 1\n")
        return False
    if shape == "backup-aside":  # the user's `mv o .o.20241205.old` of an earlier output
        make_ours(w, i, case, out.parent / f".{out.name}.20241205.old")
        return False
    if shape == "killed-temp-with-notes":  # what a killed run left, and the user's notes in it
        tmp = out.parent / f".{out.name}.k1lled00.tmp"
        make_ours(w, i, case, tmp)
        if (tmp / MARKER).is_file():
            doc = json.loads((tmp / MARKER).read_text())
            (tmp / MARKER).write_text(json.dumps({**doc, "writing": True}))
        (tmp / "thesis.txt").write_text("chapter 1\n")
        return False
    if shape == "data-copy":
        shutil.copytree(COMMITTED, out)
        return w.kind != "vllm-run"
    if shape == "symlink":
        user_folder(case / "mine")
        out.symlink_to(case / "mine", target_is_directory=True)
        return True
    if shape == "old-marker":  # an older specrace's marker: no format, so no manifest
        out.mkdir(parents=True)
        (out / MARKER).write_text(json.dumps({"kind": w.kind or "run", "version": "0.0.9"}))
        (out / "meta.json").write_text('{"mine": 1}')
        (out / "notes.txt").write_text("notes")
        return True
    raise AssertionError(shape)


def plant_file(shape: str, w: Writer, i: dict, case: Path, out: Path) -> bool:
    """Plant ``shape`` at the file output ``out``; returns whether the command must refuse."""
    if out.is_file() and shape not in ("edited-ours", "in-users-folder", "backup-beside"):
        out.unlink()  # a run folder copied for perfetto may hold one already
    if shape == "user-file":
        out.write_text("my own file\n")
        return True
    if shape == "matplotlib-png":  # made by matplotlib, as ours are, but not signed
        png(out)
        return True
    if shape == "edited-ours":  # ours, then the user edited it: theirs now
        code, err = run(w, i, case, out)
        assert code == 0, err
        with out.open("ab") as f:
            f.write(b"\n# my edit\n")
        return True
    if shape == "folder-at-path":
        user_folder(out)
        return True
    if shape == "symlink":
        (case / "mine.txt").write_text("mine\n")
        out.symlink_to(case / "mine.txt")
        return True
    if shape == "in-users-folder":  # the file is new; its neighbours are the user's
        (out.parent / "meta.json").write_text('{"mine": 1}')
        png(out.parent / "photos" / "cat.png")
        png(out.parent / "diagram.png", "blue")
        (out.parent / "draft.tmp").write_text("draft")
        return False
    if shape == "backup-beside":
        old = out.parent / f".{out.name}.20241205.old"
        old.mkdir()
        (old / "thesis.txt").write_text("chapter 1\n")
        return False
    raise AssertionError(shape)


DIR_SHAPES = ["user-folder", "fake-meta", "named-like-ours", "backup-beside", "backup-aside",
              "killed-temp-with-notes", "data-copy", "symlink", "old-marker"]  # fmt: skip
FILE_SHAPES = ["user-file", "matplotlib-png", "edited-ours", "folder-at-path", "symlink",
               "in-users-folder", "backup-beside"]  # fmt: skip
# Cases a shape cannot be made for: (writer, shape) -> why.
NOT_APPLICABLE = {
    ("vllm-export DIR", "data-copy"): "the copy of a committed run folder is its input",
    ("vllm-export DIR MRv2", "data-copy"): "the copy of a committed run folder is its input",
}  # fmt: skip
# Cases that show data loss or a traceback in the product today: (writer, shape, force) -> why,
# held as strict xfails. None today: the user's `mv o .o.20241205.old` and notes left inside a
# killed run's `.o.k1lled00.tmp` were lost until remove_stale asked each folder's marker to name
# it (an aside) and every file in it to be listed (sim.runs.outputs._stale_dir_is_ours).
KNOWN: dict[tuple[str, str, bool], str] = {}


def _cases() -> list:
    out = []
    for name, w in WRITERS.items():
        shapes = FILE_SHAPES if w.out == "file" else DIR_SHAPES
        for shape in shapes:
            if (name, shape) in NOT_APPLICABLE:
                continue
            for force in (False, True) if w.force else (False,):
                why = KNOWN.get((name, shape, force))
                marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
                ident = f"{name}-{shape}{'-force' if force else ''}"
                out.append(pytest.param(name, shape, force, id=ident, marks=marks))
    return out


# -- the invariant ---------------------------------------------------------------------------------
def snapshot(root: Path, skip: set[Path] = frozenset()) -> dict[str, bytes]:
    """Every file and link under ``root`` (links not followed), less ``skip``."""
    out: dict[str, bytes] = {}
    for d, dirs, names in os.walk(root):
        for n in [*names, *(x for x in dirs if os.path.islink(os.path.join(d, x)))]:
            p = Path(d) / n
            if p in skip:
                continue
            rel = str(p.relative_to(root))
            out[rel] = b"->" + os.fsencode(os.readlink(p)) if p.is_symlink() else p.read_bytes()
    return out


def listing(root: Path) -> set[str]:
    return {str(Path(d, n).relative_to(root)) for d, ds, ns in os.walk(root) for n in (*ds, *ns)}


def check(code: int, err: str, must_refuse: bool, what: str) -> None:
    assert "Traceback" not in err, f"{what}: a traceback\n{err}"
    if code != 0:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and ERROR_LINE.match(lines[0]), f"{what}: not one line: {err!r}"
    if must_refuse:
        assert code != 0, f"{what}: wrote over the user's output\n{err}"


@pytest.mark.parametrize(("name", "shape", "force"), _cases())
def test_a_writer_leaves_every_user_byte(name, shape, force, inputs, tmp_path, monkeypatch):
    w = WRITERS[name]
    case = tmp_path / "case"
    case.mkdir()
    if name == "vllm-forward":
        _quick_forward(monkeypatch)
    if w.place is not None:  # a run folder for perfetto, a pre-registration for vllm-outcome
        out = w.place(inputs, case)
    else:
        out = case / ("o" + w.suffix if w.out == "file" else "o")
    ours_before = listing(case)
    placed = {case / p for p in ours_before} - {out, out.parent / "predictions.json"}
    if w.out == "file":
        must_refuse = plant_file(shape, w, inputs, case, out)
    else:
        must_refuse = plant_dir(shape, w, inputs, case, out)
    # Specrace's own files: what a first run of the command wrote (marker, manifest, outputs).
    ours = placed | _ours({case / p for p in listing(case) - ours_before}, shape, out)
    before = snapshot(case, ours)
    seen = listing(case)
    argv = w.argv(inputs, out) + (["--force"] if force else [])
    code, err = run_cli(argv, w.prog, ROOT if w.cwd_root else case)
    what = f"{name} [{shape}{', --force' if force else ''}]"
    check(code, err, must_refuse, what)
    after = snapshot(case, ours)
    lost = {k for k in before if k not in after}
    changed = {k for k in before if k in after and after[k] != before[k]}
    assert not lost and not changed, f"{what}: user files lost {sorted(lost)} changed "\
                                     f"{sorted(changed)}\n{err}"  # fmt: skip
    if code != 0:  # changes nothing, or leaves the finished output beside, named in the line
        left = listing(case) - seen
        assert all(".new-" in p and str(case / p) in err for p in left), (
            f"{what}: a refusal left {left}\n{err}"
        )


USERS = {"diagram.png", "draft.tmp", "project-meta.json", "my_reads.parquet", "agreement.docx"}


def _ours(made: set[Path], shape: str, out: Path) -> set[Path]:
    """Of the files ``made`` while planting, specrace's own: a first run's output, less the
    user's files named like ours in it, or less the file the user edited."""
    if shape == "named-like-ours":
        return {p for p in made if p.name not in USERS}
    if shape == "edited-ours":
        return {p for p in made if p != out}
    return set()  # a backup beside, a copy of committed data: the user's, whoever wrote it


def _quick_forward(monkeypatch) -> None:
    """vllm-forward on the first 2 configurations only (all of them: 20 s)."""
    from gpu_check.vllm import forward

    real = forward.forward_table
    monkeypatch.setattr(
        forward, "forward_table", lambda c, cal, seeds=1, factors=None: real(c[:2], cal, 1, factors)
    )


# -- a user's file added while the command runs ----------------------------------------------------
DURING = [n for n, w in WRITERS.items() if not w.cuda and not n.startswith("vllm-export DIR")]


@pytest.mark.parametrize("name", DURING)
def test_a_file_added_while_the_command_runs(name, inputs, tmp_path, monkeypatch) -> None:
    """The user's file appears at the output just before specrace puts its output there."""
    from sim.runs import outputs

    w = WRITERS[name]
    case = tmp_path / "case"
    case.mkdir()
    if name == "vllm-forward":
        _quick_forward(monkeypatch)
    out = w.place(inputs, case) if w.place else case / ("o" + w.suffix if w.out == "file"
                                                         else "o")  # fmt: skip
    target = out.resolve()
    mine = b"the user's file, written while specrace ran\n"
    planted: list[Path] = []

    def plant(path: Path) -> None:
        if planted:
            return
        if w.out == "file":
            path.write_bytes(mine)
            planted.append(path)
        else:
            path.mkdir(parents=True, exist_ok=True)
            (path / "mine.txt").write_bytes(mine)
            planted.append(path / "mine.txt")

    real_dir, real_file = outputs.install_dir, outputs.install_file

    def install_dir(tmp, path, *a, **k):
        if Path(path).resolve() == target:
            plant(Path(path))
        return real_dir(tmp, path, *a, **k)

    def install_file(tmp, path, *a, **k):
        p = Path(path).resolve()
        if p == target or (w.out == "into" and p.parent == target):
            plant(p if w.out == "file" else target)
        return real_file(tmp, path, *a, **k)

    monkeypatch.setattr(outputs, "install_dir", install_dir)
    monkeypatch.setattr(outputs, "install_file", install_file)
    code, err = run(w, inputs, case, out)
    assert planted, f"{name}: the output was never installed ({code}: {err})"
    check(code, err, must_refuse=w.out != "into", what=f"{name} [added during the run]")
    assert planted[0].read_bytes() == mine, f"{name}: the user's file was replaced"
    if w.out == "into":
        return  # written into a folder: the user's file is kept beside specrace's
    assert ".new-" in err, err
    beside = [p for p in out.parent.iterdir() if ".new-" in p.name]
    assert len(beside) == 1 and str(beside[0]) in err, (err, beside)


# -- MRv2's watch.json: written per pass, never over the user's ----------------------------------
@pytest.mark.parametrize("theirs", ["edited", "their-own"])
def test_a_users_watch_json_in_an_mrv2_pass_folder_is_kept(theirs, tmp_path) -> None:
    """``watch.json`` sits in each pass folder, beside files of the committed export: ours where
    our run wrote it (and replaced on a rerun), theirs once edited or where they put it first."""
    out = tmp_path / "o"
    mrv2_watch_run(out)
    watch = out / "align_s16_d0ms" / "watch.json"
    if theirs == "edited":
        code, err = run_cli(["vllm-export", str(out)], gpu_main, tmp_path)
        assert code == 0, err
        ours = json.loads(watch.read_text())
        assert ours["stood_aside"] and ours["equal"], ours
        code, err = run_cli(["vllm-export", str(out)], gpu_main, tmp_path)  # ours: replaced
        assert code == 0 and json.loads(watch.read_text()) == ours, err
        watch.write_text(watch.read_text() + "\n")
    else:
        watch.write_text('{"mine": true}\n')
    before = snapshot(out)
    code, err = run_cli(["vllm-export", str(out)], gpu_main, tmp_path)
    check(code, err, must_refuse=True, what=f"vllm-export MRv2 [{theirs} watch.json]")
    assert "watch.json" in err, err
    after = snapshot(out)
    assert after[str(watch.relative_to(out))] == before[str(watch.relative_to(out))]
