"""Run every notebook in notebooks/ top to bottom in a real Jupyter kernel and store it with its
outputs (`make notebooks`), so its figures show where it is read. A rerun on the same commit
gives the same bytes: no execution timestamps, no widget state (keyed by random ids; GitHub
shows no widget anyway), and the widget views' random model ids renumbered in order of
appearance (a 32-hex-digit word; a 64-digit hash is left whole). Each file is replaced
atomically.

    python scripts/run_notebooks.py [NOTEBOOK ...]
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
MODEL_ID = re.compile(r"\b[0-9a-f]{32}\b")


def stable_ids(text: str) -> str:
    """Every 32-hex-digit word replaced by its rank of first appearance, in 32 hex digits."""
    ids: dict[str, str] = {}
    return MODEL_ID.sub(lambda m: ids.setdefault(m.group(0), f"{len(ids) + 1:032x}"), text)


def run(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    # Widget state is kept while running (nbclient's Output-widget hook needs it: without it a
    # widget that captures output raises KeyError), then left out of the file.
    client = NotebookClient(nb, timeout=600, kernel_name="python3", record_timing=False,
                            store_widget_state=True,
                            resources={"metadata": {"path": str(path.parent)}})  # fmt: skip
    client.execute()
    nb.metadata.pop("widgets", None)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(stable_ids(nbformat.writes(nb)) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    print(f"ran {path.relative_to(ROOT)}")


def main(argv: list[str]) -> int:
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
    )
    paths = [Path(a).resolve() for a in argv] or sorted((ROOT / "notebooks").glob("*.ipynb"))
    for path in paths:
        run(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
