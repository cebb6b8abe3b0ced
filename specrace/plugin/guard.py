"""``SPECRACE_GUARD``: one of :mod:`gpu_check.vllm.patches`' fixes set on the runner class."""

from __future__ import annotations

import functools
import logging

LOG = logging.getLogger("vllm.specrace")


def apply(cls: type, name: str, version: str) -> bool:
    """Set patch ``name`` on ``cls``; one log line either way. Nothing changes on a refusal."""
    from gpu_check.vllm.patches import PATCHES, PatchError, allocate_private, compile_patch

    patch = PATCHES[name]
    try:
        compiled = compile_patch(cls, patch)
    except (PatchError, OSError, TypeError) as e:  # OSError/TypeError: no source to read
        LOG.warning("specrace: guard %s refused on vLLM %s, nothing changed: %s",
                    name, version, e)  # fmt: skip
        return False
    for method, fn in compiled.items():
        setattr(cls, method, fn)
    if patch.private_buffer:
        init = cls.__dict__.get("__init__") or getattr(cls, "__init__")  # noqa: B009

        @functools.wraps(init)
        def __init__(self, *args, **kwargs):
            init(self, *args, **kwargs)
            allocate_private(self)

        setattr(cls, "__init__", __init__)  # noqa: B010
    LOG.info("specrace: guard %s (vLLM PR #%d's approach) in effect on vLLM %s: %s",
             name, patch.pr, version, patch.summary)  # fmt: skip
    return True
