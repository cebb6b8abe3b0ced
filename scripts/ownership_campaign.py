"""A hostile campaign over every command that writes: command x planted user files x --force x
odd output paths, each case in a fresh temporary folder, in-process (tests/fuzz_harness.run_cli).

The commands and the planted shapes are tests/cli_contract/test_ownership.py's (WRITERS, DIR_SHAPES,
FILE_SHAPES, plus "none": nothing planted). Each shape is tried with the output path as given
and written four other ways (a trailing slash, "/.", "sub/../", relative to the working
folder); with nothing planted, six odd paths more (empty, a symbolic link loop, a dangling
link, a FIFO, a read-only folder, a non-UTF-8 name). Each case is classified:

- ok: exit 0, the output is there, every user byte is as it was;
- clean: a refusal of one line (``error: ...``), nothing left behind but a finished output
  beside, named in the line (``.new-``), every user byte as it was;
- data loss: a user's file removed or changed (whatever the exit status);
- traceback, hang (over --hang-s), partial (exit 0 and no output; or a refusal that left
  something it does not name), unclear (a refusal not of one line), accepted invalid (exit 0
  for an empty output path).

Prints a Markdown table per surface (command) and the bad cases; exit status 1 if any case was
data loss, a traceback, a hang, partial, unclear or accepted invalid. vllm-forward runs on its
first two configurations (as in the test). Root may write into a read-only folder: there that
case is an ordinary one.

    python scripts/ownership_campaign.py            # about 5 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures as cf
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]
os.environ.setdefault("SPECRACE_FUZZ_HANG_S", "60")

FORMS = ("as given", "trailing /", "/.", "sub/..", "relative")
ODD = ("empty", "link loop", "dangling link", "fifo", "read-only folder", "non-UTF-8")
OUTCOMES = ("ok", "clean", "data loss", "traceback", "hang", "partial", "unclear",
            "accepted invalid")  # fmt: skip
BAD = OUTCOMES[2:]
_INPUTS: dict[str, Path] = {}


def build_inputs(root: Path) -> dict[str, Path]:
    from fuzz_harness import run_cli
    from test_ownership import VLLM, gpu_main, sim_main

    run = root / "run"
    code, err = run_cli(["run", "--scenario", "minimal-race", "--policy", "align", "--steps",
                         "8", "--out", str(run)], sim_main)  # fmt: skip
    assert code == 0, err
    cq = root / "cq" / "v0.23.0"
    shutil.copytree(VLLM / "ab" / "gdn-bit" / "v0.23.0" / "raw", cq / "raw")
    code, err = run_cli(["vllm-export", str(cq / "raw" / "raw_none_s64_d20ms.json.gz"),
                         "--out", str(cq / "none_s64_d20ms")], gpu_main)  # fmt: skip
    assert code == 0, err
    return {"run": run, "cq": cq}


def cases() -> list[tuple[str, str, bool, str]]:
    from test_ownership import DIR_SHAPES, FILE_SHAPES, NOT_APPLICABLE, WRITERS

    out = []
    for name, w in WRITERS.items():
        shapes = ["none", *(FILE_SHAPES if w.out == "file" else DIR_SHAPES)]
        for force in (False, True) if w.force else (False,):
            for shape in shapes:
                if (name, shape) in NOT_APPLICABLE:
                    continue
                out += [(name, shape, force, form) for form in FORMS]
            out += [(name, "none", force, form) for form in ODD]
    return out


def _reshape(text: str, form: str, case: Path, cwd: Path) -> str:
    """The output path ``text`` written as ``form`` (and what that form needs made)."""
    p = Path(text)
    if form == "as given":
        return text
    if form == "trailing /":
        return text + "/"
    if form == "/.":
        return text + "/."
    if form == "sub/..":
        (p.parent / "sub").mkdir(exist_ok=True)
        return str(p.parent / "sub" / ".." / p.name)
    if form == "relative":  # to the working folder of the command
        return os.path.relpath(text, cwd)
    if form == "empty":
        return ""
    if form == "link loop":
        (case / "loop").symlink_to(case / "loop")
        return str(case / "loop" / p.name)
    if form == "dangling link":
        p.parent.mkdir(parents=True, exist_ok=True)
        if not os.path.lexists(p):
            p.symlink_to(case / "nowhere")
        return text
    if form == "fifo":
        p.parent.mkdir(parents=True, exist_ok=True)
        if not os.path.lexists(p):
            os.mkfifo(p)
        return text
    if form == "read-only folder":
        ro = case / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        return str(ro / p.name)
    if form == "non-UTF-8":
        return os.fsdecode(os.fsencode(str(p.parent)) + b"/o\xff\xfe" + os.fsencode(p.suffix))
    raise AssertionError(form)


def one(spec: tuple[str, str, bool, str]) -> dict:
    from fuzz_harness import run_cli
    from test_ownership import ROOT as REPO
    from test_ownership import WRITERS, _ours, listing, plant_dir, plant_file

    name, shape, force, form = spec
    w = WRITERS[name]
    scratch = Path(tempfile.mkdtemp(prefix="specrace-own-"))
    case = scratch / "case"
    case.mkdir()
    rec = {"surface": name, "shape": shape, "force": force, "form": form, "argv": [],
           "stderr": ""}  # fmt: skip
    try:
        if w.cwd_root:
            (case / "data").symlink_to(REPO / "data", target_is_directory=True)
        out = w.place(_INPUTS, case) if w.place else case / ("o" + w.suffix if w.out == "file"
                                                             else "o")  # fmt: skip
        before_plant = listing(case)
        placed = {case / p for p in before_plant} - {out, out.parent / "predictions.json"}
        if shape != "none":
            (plant_file if w.out == "file" else plant_dir)(shape, w, _INPUTS, case, out)
        made = {case / p for p in listing(case) - before_plant}
        ours = placed | _ours(made, shape, out)
        argv = w.argv(_INPUTS, out) + (["--force"] if force else [])
        named = (str(out), str(out.with_suffix("")), str(out.parent))
        arg = next(i for i, a in enumerate(argv) if a in named and i > 0)
        cwd = case  # (a command that reads data/... sees the repository's through a link)
        argv[arg] = _reshape(argv[arg], form, case, cwd)
        rec["argv"] = argv
        before = snapshot(case, ours)
        seen = listing(case)
        t = time.monotonic()
        code, err = run_cli(argv, w.prog, cwd)
        rec["s"] = round(time.monotonic() - t, 2)
        rec["stderr"] = err[-1500:]
        if (case / "ro").exists():
            (case / "ro").chmod(0o755)
        after = snapshot(case, ours)
        lost = sorted(k for k in before if after.get(k) != before[k])
        if lost:
            rec["outcome"], rec["lost"] = "data loss", lost[:5]
        elif code == -1:
            rec["outcome"] = "hang"
        elif "Traceback" in err:
            rec["outcome"] = "traceback"
        elif code == 0 and not argv[arg].strip():
            rec["outcome"] = "accepted invalid"  # an empty output path taken as "here"
        elif code == 0:
            target = Path(os.path.realpath(os.path.join(cwd, argv[arg])))
            if w.place is not None:  # the file inside the folder given
                target = target / out.name
            elif w.out == "file" and form not in ODD:  # (timeline: the path less its suffix)
                target = Path(os.path.realpath(out))
            elif w.out == "file" and not target.exists():
                target = Path(os.path.join(cwd, argv[arg]) + w.suffix)
            rec["outcome"] = "ok" if target.exists() else "partial"
        else:
            lines = err.strip().splitlines()
            left = listing(case) - seen
            if any(".new-" not in p or Path(p).name not in err for p in left):
                rec["outcome"], rec["left"] = "partial", sorted(left)[:5]
            elif len(lines) == 1 and "error: " in lines[0]:
                rec["outcome"] = "clean"
            else:
                rec["outcome"] = "unclear"
    except Exception as e:  # the campaign's own set-up failed: shown, never hidden
        import traceback

        rec["outcome"], rec["stderr"] = "traceback", "set-up: " + traceback.format_exc()[-1500:]
        rec["setup"] = repr(e)
    finally:
        for d, dirs, _ in os.walk(scratch):
            for x in dirs:
                p = os.path.join(d, x)
                if not os.path.islink(p):
                    os.chmod(p, stat.S_IRWXU)
        shutil.rmtree(scratch, ignore_errors=True)
    return rec


def snapshot(root: Path, skip: set[Path]) -> dict[str, bytes]:
    """Every entry under ``root`` (links not followed, a FIFO never opened), less ``skip``."""
    out: dict[str, bytes] = {}
    for d, dirs, names in os.walk(root):
        for n in [*names, *(x for x in dirs if os.path.islink(os.path.join(d, x)))]:
            p = Path(d) / n
            if p in skip:
                continue
            st = os.lstat(p)
            rel = str(p.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = b"->" + os.fsencode(os.readlink(p))
            elif stat.S_ISREG(st.st_mode):
                out[rel] = p.read_bytes()
            else:
                out[rel] = f"mode {stat.S_IFMT(st.st_mode)}".encode()
    return out


def _init(inputs: dict[str, Path]) -> None:
    _INPUTS.update(inputs)
    from gpu_check.vllm import forward

    real = forward.forward_table
    forward.forward_table = lambda c, cal, seeds=1, factors=None: real(c[:2], cal, 1, factors)


def tables(records: list[dict]) -> str:
    by: dict[str, dict[str, collections.Counter]] = collections.defaultdict(
        lambda: collections.defaultdict(collections.Counter)
    )
    for r in records:
        group = r["shape"] if r["form"] in FORMS else f"odd path: {r['form']}"
        by[r["surface"]][group][r["outcome"]] += 1
    head = ("planted / path", "cases", *OUTCOMES)
    parts = []
    total: collections.Counter = collections.Counter()
    for surface in by:
        rows = [head, tuple("---" if i == 0 else "---:" for i in range(len(head)))]
        sub: collections.Counter = collections.Counter()
        for group, c in by[surface].items():
            rows.append((group, str(sum(c.values())), *(str(c[o]) for o in OUTCOMES)))
            sub += c
        rows.append(("**all**", str(sum(sub.values())), *(str(sub[o]) for o in OUTCOMES)))
        total += sub
        parts.append(f"### {surface}\n\n" + "\n".join("| " + " | ".join(r) + " |" for r in rows))
    line = ", ".join(f"{o} {total[o]}" for o in OUTCOMES)
    parts.insert(0, f"**{sum(total.values())} cases**: {line}")
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--hang-s", type=int, default=60, help="a case longer than this is a hang")
    p.add_argument("--limit", type=int, default=0, help="only the first N cases (a quick try)")
    args = p.parse_args(argv)
    os.environ["SPECRACE_FUZZ_HANG_S"] = str(args.hang_s)
    t = time.monotonic()
    specs = cases()[: args.limit or None]
    root = Path(tempfile.mkdtemp(prefix="specrace-own-inputs-"))
    try:
        inputs = build_inputs(root)
        import multiprocessing as mp

        ctx = mp.get_context("fork")
        with cf.ProcessPoolExecutor(args.workers, ctx, initializer=_init,
                                    initargs=(inputs,)) as pool:  # fmt: skip
            records = list(pool.map(one, specs, chunksize=4))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                          capture_output=True).stdout.strip()  # fmt: skip
    print(f"{len(records)} cases on commit {head}, {args.workers} workers, "
          f"{time.monotonic() - t:.0f} s\n")  # fmt: skip
    print(tables(records))
    bad = [r for r in records if r["outcome"] in BAD]
    groups: dict[tuple, list[dict]] = collections.defaultdict(list)
    for r in bad:
        groups[(r["outcome"], r["surface"], r["shape"])].append(r)
    if bad:
        print("\n## Bad cases (one example per outcome, command and planted shape)\n")
    for (outcome, surface, shape), rs in groups.items():
        r = rs[0]
        extra = r.get("lost") or r.get("left") or ""
        forms = sorted({f"{x['form']}{' --force' if x['force'] else ''}" for x in rs})
        last = (r["stderr"].strip().splitlines() or [""])[-1][:300]
        print(f"- **{outcome}** {surface} [{shape}]: {len(rs)} cases ({', '.join(forms)}); "
              f"e.g. `{' '.join(r['argv'])}`: {extra} {last}")  # fmt: skip
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
