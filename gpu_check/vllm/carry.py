"""What the GPU machine needs beyond its image, and how a carried vLLM tree is set up there.

The GPU machine has torch, triton, numpy, pandas and transformers but no vLLM and no network.
``scripts/vllm_inputs.sh`` builds a carry folder (default ``.vllmcarry/``) holding:

- ``vllm-<V>.zip``: the ``.py`` files and dist-info of the vLLM wheel, without its compiled
  extensions (``*.so``), vendored headers and tuned-kernel JSON tables;
- ``whl/``: the small pure-Python or manylinux wheels ``import vllm`` needs that the image lacks,
  pinned (pydantic, fastapi, openai, msgspec, pyzmq, cbor2, compressed-tensors, ...), and simpy;
- ``stubs/``: import stubs written by :func:`write_stubs` for the structured-output backends
  (xgrammar, llguidance, outlines_core, lmformatenforcer) and, from 0.34.0, the CuTeDSL
  packages (cutlass, quack, cuda-python's ``cuda`` where the image lacks it). vLLM imports
  them at start-up; their classes are inert (they construct and return more inert objects).
  Guided decoding is off and the tiny model runs no CuTeDSL kernel; the run uses neither;
- ``src/``: this project's ``sim`` and ``gpu_check`` trees, put first on ``PYTHONPATH``.

:func:`prepare` (on the GPU machine) installs the wheels into a folder, unpacks the vLLM tree,
applies the two changes listed in :data:`CHANGES`, and puts both on ``sys.path``. It changes no
line of vLLM's runner, scheduler, input batch or kernels.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import zipfile
from pathlib import Path

STUB_PACKAGES = (
    "xgrammar",
    "llguidance",
    "llguidance.hf",
    "llguidance.torch",
    "outlines_core",
    "outlines_core.json_schema",
    "lmformatenforcer",
    "lmformatenforcer.integrations",
    # 0.34.0 requires nvidia-cutlass-dsl and quack-kernels (hundreds of MB) and imports them at
    # start-up on CUDA, even for a model with no CuTeDSL kernel (model_executor/warmup/
    # kernel_warmup.py imports the MiniMax-M3 warmup, whose kernel modules import cutlass)
    "cutlass",
    "quack",
)
# Roots made only by the finder, never as a file: a real package of that name wins (the finder
# runs after the normal ones), e.g. cuda-python's ``cuda.bindings`` where the image has it.
FINDER_ONLY_ROOTS = ("cuda",)

STUB_SOURCE = '''"""specrace import stub: a structured-output backend, not carried (never used).

Any submodule that has no file here (``xgrammar.structural_tag``, ...) is made on import by the
finder below, so a vLLM release that imports one more name still starts.
"""

import importlib.abc
import importlib.machinery
import sys

__version__ = "0.0.0+specrace-stub"
_ROOTS = {ROOTS!r}


class _Meta(type):
    """A missing name is a class: it constructs, subclasses, decorates (``@cute.jit``), is
    subscripted in annotations (``cutlass.Constexpr[int]``) and has more such names as
    attributes (``cute.nvgpu.cpasync``)."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Meta(name, (_Missing,), {{"__module__": cls.__module__}})

    def __getitem__(cls, item):
        return cls

    def __or__(cls, other):
        return cls

    __ror__ = __or__


class _Missing(metaclass=_Meta):
    """Inert: vLLM 0.33.0 builds some of these at import time (vllm/parser/harmony.py), and
    0.34.0's CuTeDSL kernel modules define kernels at import time, so construction,
    attributes, calls, subscripts and arithmetic give more inert objects; nothing here does any
    work."""

    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Missing()

    def __call__(self, *args, **kwargs):
        return _Missing()

    def __getitem__(self, item):
        return _Missing()

    def _op(self, *other):
        return _Missing()

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = _op
    __floordiv__ = __mod__ = __pow__ = __lshift__ = __rshift__ = __and__ = __or__ = _op
    __xor__ = __neg__ = __invert__ = __rand__ = __ror__ = _op


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _Meta(name, (_Missing,), {{"__module__": __name__}})


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    specrace_stub = True

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in _ROOTS:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__path__ = []
        module.__version__ = __version__
        module.__getattr__ = lambda name: __getattr__(name)


if not any(getattr(f, "specrace_stub", False) for f in sys.meta_path):
    sys.meta_path.append(_StubFinder())  # after the normal finders: only for missing files
'''

# The flash-attention wrapper raises at import when its .so files are absent; the runner
# imports it on CUDA even with the Triton backend. Only the import is needed.
FLASH_ATTN_FILE = "vllm/vllm_flash_attn/__init__.py"
FLASH_ATTN_OLD = "if not (FA2_AVAILABLE or FA3_AVAILABLE):"
FLASH_ATTN_NEW = "if False:  # specrace: .so files not carried, only the import is needed"

C_SHIM_FILE = "vllm/_C_stable_libtorch.py"
C_OLD_SHIM_FILE = "vllm/_C.py"
C_SHIM = (
    '"""specrace: stand-in for the compiled extension (see gpu_check/vllm/c_ops.py)."""\n'
    "from gpu_check.vllm.c_ops import register\n\nregister()\n"
)

CHANGES = {
    FLASH_ATTN_FILE: "import no longer raises when the flash-attention .so files are absent",
    C_SHIM_FILE: "new file: registers gpu_check.vllm.c_ops instead of the compiled extension",
    C_OLD_SHIM_FILE: "new file (0.23.0 imports vllm._C too): the same stand-in",
}


def write_stubs(dest: Path) -> list[Path]:
    """One ``__init__.py`` per stub package under ``dest``."""
    out = []
    for pkg in STUB_PACKAGES:
        d = dest.joinpath(*pkg.split("."))
        d.mkdir(parents=True, exist_ok=True)
        roots = sorted({p.split(".")[0] for p in STUB_PACKAGES} | set(FINDER_ONLY_ROOTS))
        (d / "__init__.py").write_text(STUB_SOURCE.format(ROOTS=roots))
        out.append(d / "__init__.py")
    return out


class CarryError(RuntimeError):
    """The carry folder is missing or incomplete (reported as one line)."""


def find_zip(carry: Path, version: str | None = None) -> Path:
    pattern = f"vllm-{version}.zip" if version else "vllm-*.zip"

    def release(path: Path) -> tuple:
        return tuple(int(x) if x.isdigit() else -1 for x in path.stem.split("-", 1)[1].split("."))

    hits = sorted(carry.glob(pattern), key=release)  # newest release last (0.9 < 0.24)
    if not hits:
        raise CarryError(f"no {pattern} in {carry} (build it with scripts/vllm_inputs.sh)")
    from sim.errors import SpecraceError
    from sim.runs.inputs import regular_file

    try:  # a FIFO of that name would hang the unzip
        return regular_file(hits[-1], "carried vLLM archive")
    except SpecraceError as e:
        raise CarryError(str(e)) from None


def prepare(carry: Path, work: Path = Path("/tmp/specrace-vllm"), version: str | None = None):
    """Install the wheels, unpack and adjust vLLM, extend ``sys.path``. Returns the vLLM root."""
    carry = carry.resolve()
    archive = find_zip(carry, version)
    site, tree = work / "site", work / archive.stem
    wheels = sorted(glob.glob(str(carry / "whl" / "*.whl")))
    done = "\n".join(Path(w).name for w in wheels) + "\n"  # a new wheel list installs again
    if wheels and not ((site / ".done").is_file() and (site / ".done").read_text() == done):
        flags = ["-q", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir", "--upgrade"]
        cmd = [sys.executable, "-m", "pip", "install", *flags, "--target", str(site), *wheels]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise CarryError(f"pip install of the carried wheels failed: {res.stderr[-400:]}")
        (site / ".done").write_text(done)
    if not (tree / ".done").exists():
        with zipfile.ZipFile(archive) as z:
            z.extractall(tree)
        apply_changes(tree)
        (tree / ".done").write_text("ok\n")
    stubs = carry / "stubs"
    for p in (str(stubs), str(tree), str(site)):
        if p not in sys.path:
            sys.path.insert(0, p)
    # a child process (Triton's compiler, vLLM helpers) must see the same packages
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(site), str(tree), str(stubs), os.environ.get("PYTHONPATH", "")]
    )
    return tree


def apply_changes(tree: Path) -> None:
    fa = tree / FLASH_ATTN_FILE
    text = fa.read_text()
    if text.count(FLASH_ATTN_OLD) != 1:
        raise CarryError(f"{FLASH_ATTN_FILE}: expected line not found once (another vLLM?)")
    fa.write_text(text.replace(FLASH_ATTN_OLD, FLASH_ATTN_NEW))
    if not (tree / "vllm" / "_C_stable_libtorch.abi3.so").exists():
        (tree / C_SHIM_FILE).write_text(C_SHIM)
    # 0.23.0's platforms/cuda.py also imports the older extension vllm._C: the same stand-in
    if not (tree / "vllm" / "_C.abi3.so").exists():
        (tree / C_OLD_SHIM_FILE).write_text(C_SHIM)
