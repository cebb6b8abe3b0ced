"""Stand-ins for packages that later releases' import chains name but the scheduler never
calls (from 0.33.0 ``vllm.v1.structured_output`` imports the parser and tool-parser stack):
each listed package, and any submodule of it, is a module in which any name is an empty class.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

# package -> what imports it (v0.33.0)
ABSENT = {
    "partial_json_parser": "vllm/tool_parsers (streaming JSON of tool calls)",
}


class _Module(types.ModuleType):
    def __getattr__(self, name: str) -> type:
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {})


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in ABSENT:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = _Module(spec.name)
        mod.__path__ = []
        return mod

    def exec_module(self, module) -> None:
        pass


def install() -> None:
    """Append the finder (after the real ones: an installed package wins)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())
