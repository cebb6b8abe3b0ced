"""All file I/O of ``sim``: atomic writes, the run directory, and the checks of what is read.

Every output is written to a temporary file in the target folder and renamed into place,
so a killed run never leaves a half-written file behind (``sim.runs.outputs.remove_stale``
clears what a kill just before the rename left, where it can prove it is ours). Every table
a command reads is checked before use: the expected file, its schema (:func:`table_kinds`),
and a run's tables against its schedule (:func:`check_run_tables`).
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sim.errors import SpecraceError
from sim.runs.outputs import remove_stale as remove_stale  # its callers import it from here


def atomic_write(
    path: Path, write: Callable[[Path], None], checked: bool = False, sign: bool | str = False
) -> None:
    """Call ``write(tmp)`` and put ``tmp`` at ``path`` only if it succeeded. ``checked``: the
    caller has already checked the folder (:func:`check_out_path` of it) and names a plain file
    of its own in it (a sweep's thousands of point files). ``sign``: embed specrace's signature
    (``sim.runs.signature``), for a file written outside a marked folder: True in the way of
    ``path``'s suffix, or the format's suffix (".json") where the name may not say it.

    In a marked output folder the file is listed in its manifest (its earlier lines settled
    away, ``sim.runs.outputs.settle``); a file already at ``path`` is
    replaced only if specrace can prove it wrote it, checked at the moment of replacing
    (``sim.runs.outputs.install_file``)."""
    from sim.runs.outputs import home, install_file, record, settle, sha256

    if not checked:
        check_out_path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        folder = home(path.parent)
        listed = folder is not None
        tmp = _new_temp(path, folder if listed else None)
    except OSError as e:
        raise SpecraceError(f"cannot write {path}: {e.strerror}") from None
    try:
        write(tmp)
        if sign:
            from sim.runs.signature import sign as signed

            tmp.write_bytes(signed(tmp.read_bytes(), path, sign if isinstance(sign, str) else ""))
        if listed:
            assert folder is not None
            record(folder, path.relative_to(folder).as_posix(), sha256(tmp))
        install_file(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    if listed and not checked:  # a sweep's thousands of point files: each written once
        assert folder is not None
        settle(folder, path.relative_to(folder).as_posix())


_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)


def _new_temp(path: Path, folder: Path | None = None) -> Path:
    """A new empty file ``.<name>.<8 random chars>.tmp`` beside ``path`` (the name
    ``sim.runs.outputs.remove_stale`` knows), created with mode 0666 less the umask, as outputs
    are (mkstemp's 0600 would need a chmod, and reading the umask two more calls). In a marked
    ``folder`` it is listed as a temporary first, so a kill leaves nothing unproved there."""
    from sim.runs.outputs import record

    for _ in range(100):
        tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
        if folder is not None:
            record(folder, tmp.relative_to(folder).as_posix(), temp=True)
        try:
            os.close(os.open(tmp, _TEMP_FLAGS, 0o666))
        except FileExistsError:
            continue
        return tmp
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(path))


def check_out_path(path: Path) -> None:
    """An output file's path: not empty, not a directory, no file where a folder belongs, no
    link that loops or dangles (``sim.runs.outputs.check_path``)."""
    from sim.runs.outputs import check_path

    if not str(path) or path.is_dir():
        raise SpecraceError(f"--out {path}: a file name is needed, not a directory")
    check_path(path)


def atomic_write_text(
    path: Path, text: str, checked: bool = False, sign: bool | str = False
) -> None:
    def write(tmp: Path) -> None:
        tmp.write_text(text)

    atomic_write(path, write, checked, sign)


def write_json(path: Path, obj: Any, checked: bool = False, sign: bool = False) -> None:
    """``obj`` as JSON; ``sign``: signed as JSON whatever the file is named."""
    text = json.dumps(obj, sort_keys=True, indent=1) + "\n"
    atomic_write_text(path, text, checked, ".json" if sign else False)


def read_json(path: Path, what: str) -> Any:
    """A JSON file specrace reads back (a sweep's spec, a run's meta): one line naming it when
    it is missing, not a regular file (a FIFO is refused, not waited on), binary, truncated or
    not JSON (:func:`sim.runs.inputs.read_json`)."""
    from sim.runs.inputs import META_MAX
    from sim.runs.inputs import read_json as read_input

    return read_input(path, what, META_MAX)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def fresh_output_dir(out: Path, force: bool = False, kind: str = "run") -> Iterator[Path]:
    """A run directory written whole or not at all.

    Yields a temporary directory beside ``out``, marked at once as a specrace ``kind`` output
    being written; on success its files are listed in its manifest and it takes the place of
    ``out``, which must be absent or empty, or, with ``force``, specrace's own ``kind`` output
    with nothing foreign in it: checked before any work (:func:`sim.runs.outputs.prepare_dir`)
    and again at the moment of replacing (:func:`sim.runs.outputs.install_dir`). On failure or
    Ctrl-C the temporary, and any parent folder this call created, is removed and ``out`` is
    left as it was. A directory holds one run: writing a second run into it is refused.
    """
    from sim.runs.outputs import install_dir, prepare_dir, seal, write_marker

    path = prepare_dir(out, kind, replace=True, force=force)
    top = path.parent
    while not top.parent.exists():
        top = top.parent
    created = top if not top.exists() else None  # the first parent folder this run makes
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
        write_marker(tmp, kind, writing=True)
    except OSError as e:
        raise SpecraceError(f"--out {out}: cannot create: {e.strerror}") from None
    done = False
    try:
        yield tmp
        seal(tmp, kind)
        os.chmod(tmp, 0o777 & ~_umask())
        install_dir(tmp, path, kind, force=force)
        done = True
        remove_stale(path.parent, path.name)  # what a killed earlier run of this --out left
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        if not done and created is not None:
            _remove_empty(path.parent, created)


def _remove_empty(folder: Path, top: Path) -> None:
    """Remove ``folder`` and its parents up to ``top`` while they are empty (this run made them)."""
    while True:
        try:
            folder.rmdir()
        except OSError:
            return
        if folder == top:
            return
        folder = folder.parent


def ensure_out_dir(out: Path, kind: str) -> Path:
    """A folder a command writes its files into (``sim.runs.outputs.prepare_dir``), created and
    marked."""
    from sim.runs.outputs import claim_dir, prepare_dir

    return claim_dir(prepare_dir(out, kind, replace=False), kind)


def read_parquet(path: Path, what: str, schema: dict[str, str] | None = None):
    """A Parquet table, or one clear error if it is missing, truncated, not Parquet, or (with
    ``schema``: column -> int | bool | string | float) not the table the command expects."""
    import pandas as pd

    from sim.runs.inputs import regular_file

    regular_file(path, what)  # a FIFO or a folder is one line, not a wait or a pyarrow error
    try:
        df = pd.read_parquet(path)
    except Exception as e:  # pyarrow raises several types for a damaged file
        raise SpecraceError(
            f"{what} {path} is unreadable or truncated ({type(e).__name__})"
        ) from None
    if schema:
        check_schema(df, schema, f"{path}: not a {what}")
    return df


_KINDS = {"int": "is_integer_dtype", "bool": "is_bool_dtype", "float": "is_numeric_dtype"}


def check_schema(df, schema: dict[str, str], prefix: str) -> None:
    """Every column of ``schema`` present with the right kind of values."""
    from pandas.api import types

    missing = [c for c in schema if c not in df.columns]
    if missing:
        raise SpecraceError(f"{prefix} (missing columns {', '.join(missing)})")
    for col, kind in schema.items():
        dtype = df[col].dtype
        if kind == "string":
            ok = types.is_string_dtype(dtype) or types.is_object_dtype(dtype)
        else:
            ok = getattr(types, _KINDS[kind])(dtype)
        if kind == "int" and types.is_bool_dtype(dtype):
            ok = False
        if not ok:
            raise SpecraceError(f"{prefix} (column {col} is {dtype}, expected {kind})")


# The columns of a hardware replay table that compare needs, with the kind of values of each.
OBSERVED_COLUMNS = {
    "policy": "string", "step": "int", "req_id": "string", "true_count": "int",
    "cpu_observed": "int", "cpu_predicted": "int", "agree": "bool", "gpu_consumed": "int",
    "gpu_wrong": "bool", "land_pos": "int", "land_during_op": "bool", "n_ops": "int",
    "reads_buffer": "bool",
}  # fmt: skip


# -- the tables a command reads: the expected file, its schema, a clear line for the wrong kind
# file name -> (what it is, what writes it, column -> int | bool | string | float)
def table_kinds() -> dict[str, tuple[str, str, dict[str, str]]]:
    from sim.model.reads import READ_COLUMNS

    kind = {"int64": "int", "int32": "int", "bool": "bool", "string": "string"}
    return {
        "reads.parquet": (
            "reads table", "python -m sim run", {c: kind[t] for c, t in READ_COLUMNS.items()}
        ),
        "trace.parquet": (
            "trace", "python -m sim run without --no-trace",
            {"time_ns": "int", "dur_ns": "int", "step": "int", "actor": "string",
             "event": "string", "row": "int", "value": "int", "req_id": "string"},
        ),
        "observed.parquet": ("replay table", "python -m gpu_check replay", OBSERVED_COLUMNS),
        "sweep.parquet": (
            "sweep table", "python -m sim sweep",
            {"policy": "string", "seed": "int", "steps": "int", "reads": "int",
             "cpu_wrong": "int", "gpu_wrong": "int", "corrupted_requests": "int",
             "mean_step_ns": "float"},
        ),
    }  # fmt: skip


def read_table(path: Path, name: str):
    """The table ``name`` (a key of :func:`table_kinds`) at ``path``, schema checked; a table
    of another kind is named as such ("... is a trace (trace.parquet), not a reads table")."""
    kinds = table_kinds()
    what, writer, schema = kinds[name]
    if not path.is_file() and path.name == name:
        raise SpecraceError(f"{what} not found: {path} ({writer} writes it)")
    df = read_parquet(path, what)
    try:
        check_schema(df, schema, f"{path}: not a {what} ({writer} writes {name})")
    except SpecraceError:
        for other, (other_what, _w, other_schema) in kinds.items():
            if other != name and _matches(df, other_schema):
                raise SpecraceError(
                    f"{path} is a {other_what} ({other}), not a {what} ({name})"
                ) from None
        raise
    if name in ("observed.parquet", "sweep.parquet"):
        _check_counts(df, path, what, name)
    return df


def _check_counts(df, path: Path, what: str, name: str) -> None:
    """A replay or sweep table: rows of known policies, counts that can be counts."""
    from sim.model.policies import POLICIES, SYNC_SCHEDULING

    if df.empty:
        raise SpecraceError(f"{path}: the {what} has no rows")
    policies = set(df["policy"].dropna().unique()) - {*POLICIES, SYNC_SCHEDULING.name}
    if policies or df["policy"].isna().any():
        raise SpecraceError(f"{path}: unknown policy {sorted(policies)[:1] or [None]}")
    if name == "sweep.parquet":
        counts = df[["steps", "reads", "cpu_wrong", "gpu_wrong", "corrupted_requests"]]
        if (counts < 0).any().any() or (df["steps"] < 1).any():
            raise SpecraceError(f"{path}: negative counts or a point of no steps")
        if ((df["cpu_wrong"] > df["reads"]) | (df["gpu_wrong"] > df["reads"])).any():
            raise SpecraceError(f"{path}: more wrong reads than reads")
        swept = [c for c in df.columns if c.startswith("set.")]
        if not swept or df[swept].isna().any().any():
            raise SpecraceError(f"{path}: no swept column (set.*), or a point without its value")
        from pandas.api import types

        for c in swept:  # a time is drawn on a numeric axis
            if (c.endswith("_ns") or "_ns_" in c) and not types.is_numeric_dtype(df[c].dtype):
                raise SpecraceError(f"{path}: swept time {c} is {df[c].dtype}, not a number")
        return
    # Column groups that compare uses when present (a --sim-run replay; the landing timing).
    groups = (
        {"sim_gpu_wrong": "bool", "sim_landed": "bool", "sim_cpu_value": "int",
         "sim_margin_ns": "int"},
        {"land_predicted_ns": "int", "land_seen_ns": "int", "land_bracket_ns": "int",
         "op_err_max_ns": "int"},
    )  # fmt: skip
    for group in groups:
        if any(c in df.columns for c in group):
            check_schema(df, group, f"{path}: not a whole {what}")
    bad = (df["land_pos"] < -1) | (df["land_pos"] > df["n_ops"]) | (df["n_ops"] < 0)
    if bad.any():
        raise SpecraceError(f"{path}: a landing position outside its step's ops")


def _matches(df, schema: dict[str, str]) -> bool:
    try:
        check_schema(df, schema, "")
    except SpecraceError:
        return False
    return True


def read_meta(path: Path) -> dict[str, Any]:
    """A run's ``meta.json``: a known policy, a seed and a valid scenario."""
    from sim.model.params import scenario_from_dict
    from sim.model.policies import POLICIES, SYNC_SCHEDULING

    meta = read_json(path, "run metadata")
    if not isinstance(meta, dict):
        raise SpecraceError(f"{path}: not a run's meta.json (not a JSON object)")
    policy, seed, scenario = meta.get("policy"), meta.get("seed"), meta.get("scenario")
    if not isinstance(policy, str) or policy not in (*POLICIES, SYNC_SCHEDULING.name):
        raise SpecraceError(f"{path}: policy {policy!r} is not a known policy")
    if type(seed) is not int or not 0 <= seed < 2**63:
        raise SpecraceError(f"{path}: seed {seed!r} is not an integer in 0..2^63-1")
    if not isinstance(scenario, dict):
        raise SpecraceError(f"{path}: scenario is missing or not a table")
    scenario_from_dict(scenario, "meta", str(path))
    versions, commit = meta.get("versions", {}), meta.get("git_commit", "")
    if not isinstance(versions, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in versions.items()
    ):
        raise SpecraceError(f"{path}: versions {versions!r} is not a table of names and versions")
    if not isinstance(commit, str):
        raise SpecraceError(f"{path}: git_commit {commit!r} is not a commit")
    if "trace" in meta and type(meta["trace"]) is not bool:
        raise SpecraceError(f"{path}: trace {meta['trace']!r} is not true or false")
    return meta


COLS_IMPLIED = ("step", "row", "prev_row", "true_count", "prev_drafts")


def check_run_tables(schedule, reads, trace, where: str) -> None:
    """A run's reads (and trace, if given) belong to ``schedule``: steps and rows that exist,
    each read's request in its row, one read and the step's row ops in the trace. What the
    analyses index by is checked here, so a table edited by hand or taken from another run
    is one clear line, not an IndexError inside a plot."""
    import numpy as np

    n_steps, n_rows = len(schedule.steps), schedule.max_num_reqs

    def fail(name: str, msg: str) -> SpecraceError:
        return SpecraceError(f"{where}/{name} does not belong to its schedule.json: {msg}")

    step = reads["step"].to_numpy()
    row = reads["row"].to_numpy()
    bad = (step < 1) | (step >= n_steps) | (row < 0) | (row >= n_rows)
    bad |= (reads["prev_row"].to_numpy() < -1) | (reads["prev_row"].to_numpy() >= n_rows)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise fail("reads.parquet", f"read {i} is at step {step[i]}, row {row[i]} "
                   f"(the schedule has steps 1..{n_steps - 1}, rows 0..{n_rows - 1})")  # fmt: skip
    if reads["req_id"].isna().any():
        raise fail("reads.parquet", "a read without its request id")
    for i, (n, r, req) in enumerate(zip(step, row, reads["req_id"], strict=True)):
        ids = schedule.steps[int(n)].req_ids
        if r >= len(ids) or ids[r] != req:
            raise fail("reads.parquet", f"read {i}: request {req!r} is not in row {r} at step {n}")
    dup = reads.duplicated(["step", "req_id"]) | reads.duplicated(["step", "row"])
    if dup.any():
        i = int(np.flatnonzero(dup.to_numpy())[0])
        raise fail("reads.parquet", f"read {i} repeats a read of step {step[i]}")
    # Exactly the reads the schedule implies (sim.model.reads.build_reads): one per row of
    # step N >= 1 that was in a row of step N - 1, with that row's true count and drafts.
    parts: dict[str, list[np.ndarray]] = {k: [np.zeros(0, np.int64)] for k in COLS_IMPLIED}
    for n in range(1, n_steps):
        pp = np.asarray(schedule.steps[n].prev_positions)
        rows = np.flatnonzero(pp >= 0)
        prev = schedule.steps[n - 1]
        for k, v in zip(COLS_IMPLIED, (np.full(len(rows), n), rows, pp[rows],
                        np.asarray(prev.accepted)[pp[rows]], np.asarray(prev.drafts)[pp[rows]]),
                        strict=True):  # fmt: skip
            parts[k].append(v)
    want = {k: np.concatenate(v) for k, v in parts.items()}
    got = reads.sort_values(["step", "row"], kind="stable")
    if len(want["step"]) != len(got):
        have = set(zip(step.tolist(), row.tolist(), strict=True))
        implied = list(zip(want["step"].tolist(), want["row"].tolist(), strict=True))
        missing = [(n, r) for n, r in implied if (n, r) not in have]
        what = (f"no read of step {missing[0][0]}, row {missing[0][1]}" if missing
                else "reads the schedule does not have")  # fmt: skip
        raise fail("reads.parquet", f"{len(got)} reads, the schedule implies {len(implied)}: "
                   f"{what}")  # fmt: skip
    for k, v in want.items():
        diff = np.flatnonzero(got[k].to_numpy() != v)
        if len(diff):
            i = int(diff[0])
            n, r = got["step"].iloc[i], got["row"].iloc[i]
            raise fail("reads.parquet", f"the read of step {n}, row {r} has {k} "
                       f"{got[k].iloc[i]}, the schedule {v[i]}")  # fmt: skip
    from sim.model.verdict import KINDS

    kinds = set(reads["kind"].dropna().unique()) - set(KINDS)
    if kinds or reads["kind"].isna().any():
        raise fail("reads.parquet", f"unknown hazard kind {sorted(kinds)[:1] or [None]}")
    if trace is None:
        return
    t_step, t_row = trace["step"].to_numpy(), trace["row"].to_numpy()
    t, d = trace["time_ns"].to_numpy(), trace["dur_ns"].to_numpy()
    bad = (t_step < 0) | (t_step >= n_steps) | (t_row < -1) | (t_row >= n_rows)
    bad |= (t < 0) | (d < 0) | (t > 10**15) | (d > 10**15)
    bad |= trace["actor"].isna().to_numpy() | trace["event"].isna().to_numpy()
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise fail("trace.parquet", f"event {i} (step {t_step[i]}, row {t_row[i]}, "
                   f"time {t[i]} ns, duration {d[i]} ns) is out of range")  # fmt: skip
    worker = trace[trace["actor"] == "worker_cpu"]
    ops = worker[worker["event"].isin(["remove", "add", "move", "swap"])]["step"].value_counts()
    for n in sorted(set(t_step.tolist())):
        n_ops = len(schedule.steps[n].ops)
        if int(ops.get(n, 0)) != n_ops:
            raise fail("trace.parquet", f"step {n} has {int(ops.get(n, 0))} row ops, "
                       f"the schedule {n_ops}")  # fmt: skip
    once = {
        "read_counts": worker[worker["event"].str.startswith("read_counts")],
        "_update_states": worker[worker["event"] == "_update_states"],
        "counts_d2h_land": trace[trace["event"] == "counts_d2h_land"],
    }
    for name, ev in once.items():
        dup = ev["step"][ev["step"].duplicated()]
        if len(dup):
            raise fail("trace.parquet", f"step {int(dup.iloc[0])} has two {name} events")
    has_read = set(once["read_counts"]["step"].tolist())
    missing = sorted(set(step.tolist()) - has_read)
    if missing:
        raise fail("trace.parquet", f"step {missing[0]} has reads but no read_counts event")
