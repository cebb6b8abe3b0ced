"""What a wrong GDN count did to the tokens (issue #26): ``python -m gpu_check
vllm-consequence RUN... --out data/vllm/ab/consequence.json``.

Each ``RUN`` is a ``vllm-run --reference async-off`` folder (the ``$res`` of
``scripts/vllm_device.sh``, or a ``data/vllm/.../v<release>/`` with ``raw/``): per V1 raw record
``raw_<mode>_<config>.json(.gz)``, its export ``<mode>_<config>/observed_vllm.parquet``
(``vllm-export``) and the async-off reference ``ref_<mode>_<name>.json(.gz)`` of the same
requests. Requests are joined by request id (``<config>-<req_index>``, the same in both passes:
the workload of one configuration and seed); the wrong reads are
:func:`gpu_check.vllm.outcome.wrong_gdn` of the export, the reads ``vllm-ab`` counts.

Per request: ``first_diff`` is the first token index where the greedy tokens of the async-on
pass and the reference differ (the shorter length where one is a prefix of the other; none when
equal). For a request with wrong reads, ``wrong_token_index`` is the number of tokens it had
emitted before the step of its first wrong read: the sum of the counts step N's D2H carried for
its earlier rows that were not partial prefills (exact in ``none`` mode, where that count is
what the step accepted; a lower bound in align, whose postprocessed count is 1 where the state
block did not move). A wrong count at step N changes what step N emits and everything after,
so a diverging request should have ``first_diff >= wrong_token_index``
(``from_the_wrong_step``).

The four counts of the issue: ``wrong_requests`` (requests with at least one wrong read),
``diverged_with_wrong`` (of those, tokens differ from the reference), ``requests_without_wrong``
and ``identical_without_wrong`` (of those, token-identical).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from sim.errors import SpecraceError

REF_SCHEMA = "specrace.vllm_reference"
COUNTS = ("diverged_with_wrong", "wrong_requests", "identical_without_wrong",
          "requests_without_wrong")  # fmt: skip


def acceptance_histogram(steps: list[dict[str, Any]]) -> dict[str, int]:
    """How many rows that had drafts carried each count in the D2H (a ``vllm-run`` record's
    steps): ``{"1": n, ..., "k+1": n}``. With zeroed weights every key is k + 1."""
    hist: dict[int, int] = {}
    for s in steps:
        truth, ids = s.get("truth"), s.get("req_ids")
        if truth is None or ids is None:
            continue
        spec = s.get("spec") or {}
        discard = s.get("discard") or [False] * len(ids)
        for i, rid in enumerate(ids[: len(truth)]):
            if spec.get(rid, 0) > 0 and not discard[i]:
                hist[int(truth[i])] = hist.get(int(truth[i]), 0) + 1
    return {str(c): n for c, n in sorted(hist.items())}


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first index where ``a`` and ``b`` differ; ``None`` if they are equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def tokens_before(raw: dict[str, Any], wanted: dict[str, int]) -> dict[str, int]:
    """For each ``req_id -> step`` (a prepared-step index, as ``observed_vllm.parquet``'s
    ``step``), the tokens the request had emitted before that step (see the module doc)."""
    from gpu_check.vllm.export import prepared_steps

    at: dict[int, list[str]] = {}
    for rid, step in wanted.items():
        at.setdefault(step, []).append(rid)
    cum: dict[str, int] = {}
    out: dict[str, int] = {}
    for n, s in enumerate(prepared_steps(raw)):
        ids = s["req_ids"]
        for rid in at.get(n, ()):
            out[rid] = cum.get(rid, 0)
        truth = s.get("truth") or [1] * len(ids)
        discard = s.get("discard") or [False] * len(ids)
        for i, rid in enumerate(ids):
            if rid in wanted and not discard[i]:
                cum[rid] = cum.get(rid, 0) + int(truth[i])
    missing = sorted(set(wanted) - set(out))
    if missing:
        raise SpecraceError(f"the wrong reads of {missing[:3]} are at steps the record lacks")
    return out


def _load(path: Path) -> dict[str, Any]:
    try:
        data = path.read_bytes()
        return json.loads(gzip.decompress(data) if path.suffix == ".gz" else data)
    except (OSError, ValueError, gzip.BadGzipFile) as e:
        raise SpecraceError(f"cannot read {path}: {e}") from None


def load_reference(path: Path) -> dict[str, Any]:
    ref = _load(path)
    if not isinstance(ref, dict) or ref.get("schema") != REF_SCHEMA:
        raise SpecraceError(f"{path}: not an async-off reference (vllm-run --reference async-off)")
    if ref.get("async_scheduling") is not False:
        raise SpecraceError(f"{path}: its engine ran with async scheduling on, not off")
    return ref


def _find(folder: Path, stem: str) -> Path | None:
    return next((p for p in (folder / f"{stem}.json", folder / f"{stem}.json.gz") if p.is_file()),
                None)  # fmt: skip


def raw_records(run: Path) -> list[Path]:
    if not run.is_dir():
        raise SpecraceError(f"{run}: not a folder (give a vllm-run output folder)")
    found = sorted(run.glob("raw_*.json*")) + sorted((run / "raw").glob("raw_*.json*"))
    if not found:
        raise SpecraceError(f"{run}: no raw_<mode>_<config>.json(.gz), at the top or in raw/")
    return found


def one_record(run: Path, raw_path: Path) -> dict[str, Any] | None:
    """The consequence of one raw record (``None`` for an MRv2 record: no GDN count read)."""
    from gpu_check.vllm.config import reference_name, run_config_of
    from gpu_check.vllm.export import load_raw
    from gpu_check.vllm.outcome import wrong_gdn
    from gpu_check.vllm.tables import raw_name
    from sim.runs.io import read_parquet

    raw = load_raw(raw_path)
    if raw.get("runner") == "v2":
        return None
    name, mode = raw_name(raw_path), raw["mode"]
    if "token_ids" not in raw:
        raise SpecraceError(f"{raw_path}: no token_ids (recorded by a vllm-run that kept none)")
    ref_stem = f"ref_{mode}_{reference_name(run_config_of(raw['config']))}"
    ref_path = _find(raw_path.parent, ref_stem) or _find(run, ref_stem)
    if ref_path is None:
        raise SpecraceError(f"{raw_path}: no {ref_stem}.json(.gz) beside it (the async-off "
                            "reference: vllm-run --reference async-off)")  # fmt: skip
    ref = load_reference(ref_path)
    ours = {r["req_id"]: (r["prompt_len"], r["output_len"]) for r in raw["requests"]}
    theirs = {r["req_id"]: (r["prompt_len"], r["output_len"]) for r in ref["requests"]}
    if ours != theirs:
        raise SpecraceError(f"{ref_path}: not the requests of {raw_path} (prompt or output "
                            "lengths differ by request id)")  # fmt: skip
    tokens, ref_tokens = raw["token_ids"], ref["token_ids"]
    for got, path in ((tokens, raw_path), (ref_tokens, ref_path)):
        lost = sorted(set(ours) - set(got))
        if lost:
            raise SpecraceError(f"{path}: no tokens for {len(lost)} requests ({lost[0]}, ...)")
    folder = run / name
    reads = read_parquet(folder / "observed_vllm.parquet", f"vLLM reads of {raw_path.name} "
                         "(run python -m gpu_check vllm-export first)")  # fmt: skip
    wrong = wrong_gdn(reads).sort_values(["step", "row"])
    unknown = sorted(set(wrong["req_id"]) - set(ours))
    if unknown:
        raise SpecraceError(
            f"{folder}/observed_vllm.parquet: wrong reads of requests {unknown[:3]} that "
            f"{raw_path} does not have (another run?)"
        )
    first = wrong.drop_duplicates("req_id", keep="first").set_index("req_id")
    before = tokens_before(raw, {str(r): int(s) for r, s in first["step"].items()})
    consumed_col = "cpu_value" if mode == "align" else "gpu_value"
    diverging, quiet, noise = [], [], []
    identical = 0
    for rid in sorted(ours, key=_req_order):
        d = first_difference(tokens[rid], ref_tokens[rid])
        if rid in first.index:
            w = first.loc[rid]
            if d is None:
                quiet.append(rid)
                continue
            diverging.append({
                "req_id": rid, "first_diff_index": d, "wrong_step": int(w["step"]),
                "wrong_token_index": before[rid], "from_the_wrong_step": d >= before[rid],
                "true_count": int(w["true_count"]), "consumed_count": int(w[consumed_col]),
                "wrong_reads": int((wrong["req_id"] == rid).sum()),
            })  # fmt: skip
        elif d is None:
            identical += 1
        else:
            noise.append({"req_id": rid, "first_diff_index": d})
    n_wrong = len(first)
    return {
        "run": str(run), "raw": str(raw_path), "reference": str(ref_path),
        "vllm": raw.get("vllm_version", ""), "mode": mode, "config": raw["config"]["name"],
        "patch": raw.get("patch", "none"), "weights": raw.get("weights", "zero"),
        "requests": len(ours), "wrong_requests": n_wrong, "diverged_with_wrong": len(diverging),
        "requests_without_wrong": len(ours) - n_wrong, "identical_without_wrong": identical,
        "diverged_from_the_wrong_step": sum(x["from_the_wrong_step"] for x in diverging),
        "acceptance": acceptance_histogram(raw["steps"]),
        "diverging_with_wrong": diverging, "wrong_not_diverged": quiet,
        "diverged_without_wrong": noise,
    }  # fmt: skip


def _req_order(req_id: str) -> tuple[str, int]:
    head, _, idx = req_id.rpartition("-")
    return (head, int(idx)) if idx.isdigit() else (req_id, -1)


def consequence(runs: list[Path], out: Path) -> dict[str, Any]:
    """Every V1 record of every run; the four counts over all of them, then per record."""
    from sim.runs.io import write_json

    rows = [r for run in runs for p in raw_records(run) if (r := one_record(run, p)) is not None]
    if not rows:
        raise SpecraceError(f"no V1 raw record under {', '.join(map(str, runs))}")
    doc = {
        "schema": "specrace.vllm_consequence",
        **{k: sum(r[k] for r in rows) for k in COUNTS},
        "diverged_from_the_wrong_step": sum(r["diverged_from_the_wrong_step"] for r in rows),
        "runs": rows,
    }
    write_json(out, doc, sign=True)
    return doc


def consequence_text(doc: dict[str, Any]) -> str:
    lines = [
        f"wrong GDN count: {doc['diverged_with_wrong']:,} of {doc['wrong_requests']:,} requests "
        f"diverged from the async-off reference ({doc['diverged_from_the_wrong_step']:,} from "
        f"the step of the wrong read on); without one: {doc['identical_without_wrong']:,} of "
        f"{doc['requests_without_wrong']:,} token-identical"
    ]
    for r in doc["runs"]:
        lines.append(
            f"  {r['vllm']} {r['mode']} {r['config']} ({r['weights']} weights): "
            f"{r['diverged_with_wrong']}/{r['wrong_requests']} diverged with, "
            f"{r['identical_without_wrong']}/{r['requests_without_wrong']} identical without; "
            f"acceptance {r['acceptance']}"
        )
    return "\n".join(lines)
