"""specrace inside a vLLM deployment: a ``vllm.general_plugins`` entry point (issue 46).

vLLM calls :func:`register` in every process (API server, engine core, workers), before the
worker class is chosen, and may call it more than once. It is inert unless one of:

- ``SPECRACE_WATCH=1``: every V1 runner built in this process records each step's row ops,
  where the accepted counts' D2H landed among them (``event.query()``, no synchronization) and
  the true counts (a private copy on a side stream ordered after the producer); every count
  consumed that differs from the truth goes to ``SPECRACE_WATCH_OUT`` (default
  ``./specrace-watch``) as JSONL, with the hazard kind ``sim.model.verdict`` gives it, and a
  summary line goes to vLLM's log every ``SPECRACE_WATCH_EVERY`` steps (default 1000);
- ``SPECRACE_GUARD=private-d2h`` or ``sync-before-moves``: that fix
  (:mod:`gpu_check.vllm.patches`) is set on the V1 ``GPUModelRunner`` class at load.

Gated on the vLLM release found: 0.23.0-0.33.0 (V1 runner); on 0.34.0 and later, or with
``VLLM_USE_V2_MODEL_RUNNER=1``, one line says the counts stay on the GPU and nothing is done.
Importing this module imports neither torch nor vLLM (docs/deployment.md).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

LOG = logging.getLogger("vllm.specrace")  # under vllm's logger: its handlers print it
MARK = "_specrace_plugin"  # set on the runner class once installed: a second load sees it
DEFAULT_OUT = "specrace-watch"
DEFAULT_EVERY = 1000
GUARDS = ("private-d2h", "sync-before-moves")
_loaded: dict[str, str] = {}  # this process: what register() decided (idempotence)


@dataclass(frozen=True)
class Settings:
    watch: bool
    guard: str | None
    out: str
    every: int


class SettingError(ValueError):
    pass


def settings(env: Mapping[str, str]) -> Settings | None:
    """The plugin's settings from the environment; None: inert (nothing enabled)."""
    watch = env.get("SPECRACE_WATCH", "").strip().lower() in ("1", "true", "yes", "on")
    guard = env.get("SPECRACE_GUARD", "").strip() or None
    if guard is not None and guard not in GUARDS:
        raise SettingError(f"SPECRACE_GUARD={guard!r}: one of {', '.join(GUARDS)}")
    if not watch and guard is None:
        return None
    every_text = env.get("SPECRACE_WATCH_EVERY", str(DEFAULT_EVERY)).strip()
    if not every_text.isdigit() or int(every_text) < 1:
        raise SettingError(f"SPECRACE_WATCH_EVERY={every_text!r}: a positive step count")
    out = env.get("SPECRACE_WATCH_OUT", "").strip() or DEFAULT_OUT
    return Settings(watch, guard, out, int(every_text))


def release_state(version: str, env: Mapping[str, str]) -> str:
    """``v1``: a release with the V1 runner specrace knows; ``gpu``: the counts stay on the GPU
    (0.34.0 and later, or MRv2 forced); ``unknown``: before 0.23.0 or not a release number."""
    from sim.resolve.release_facts import RELEASES, has_v1_runner

    m = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    if not m:
        return "unknown"
    base = ".".join(m.groups())
    key = tuple(int(x) for x in m.groups())
    if env.get("VLLM_USE_V2_MODEL_RUNNER", "").strip().lower() in ("1", "true"):
        return "gpu"
    if base in RELEASES:
        return "v1" if has_v1_runner(base) else "gpu"
    last = tuple(int(x) for x in RELEASES[-1].split("."))
    return "gpu" if key > last else "unknown"


def register() -> None:
    """vLLM's entry point: decide once per process, install at most once per runner class."""
    if _loaded:
        return
    try:
        cfg = settings(os.environ)
    except SettingError as e:
        _loaded["state"] = "refused"
        LOG.warning("specrace: %s; the plugin does nothing", e)
        return
    if cfg is None:
        _loaded["state"] = "inert"
        return
    import vllm

    version = str(getattr(vllm, "__version__", "?"))
    state = release_state(version, os.environ)
    _loaded["version"] = version
    if state == "gpu":
        _loaded["state"] = "not-applicable"
        LOG.info("specrace: vLLM %s runs model runner V2: the accepted counts stay on the GPU, "
                 "no race to watch or guard; the plugin does nothing", version)  # fmt: skip
        return
    if state == "unknown":
        _loaded["state"] = "refused"
        LOG.warning("specrace: vLLM %s is not a release specrace knows (0.23.0-0.33.0); "
                    "the plugin does nothing", version)  # fmt: skip
        return
    try:  # a plugin that raises stops vLLM's start: say why, and do nothing
        from vllm.v1.worker import gpu_model_runner

        _loaded["state"] = install(gpu_model_runner.GPUModelRunner, cfg, version)
    except Exception as e:
        _loaded["state"] = "refused"
        LOG.warning("specrace: not installed on vLLM %s, nothing changed: %s: %s",
                    version, type(e).__name__, e)  # fmt: skip


def install(cls: type, cfg: Settings, version: str) -> str:
    """Guard and watch on ``cls`` (the V1 runner class); a class already marked is left as it
    is. Returns what was done: ``installed``, ``already`` or ``refused``."""
    if MARK in cls.__dict__:
        return "already"
    if cfg.guard is not None:
        from specrace.plugin.guard import apply

        if not apply(cls, cfg.guard, version):
            return "refused"
    if cfg.watch:
        from specrace.plugin.watch import arm

        arm(cls, cfg, version)
    setattr(cls, MARK, (cfg.guard, cfg.watch))
    return "installed"
