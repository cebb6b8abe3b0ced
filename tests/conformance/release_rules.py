"""Read, from one vLLM release's own source tree, the facts sim.resolve's rules rest on.

Pure ``ast`` over the unpacked ``.py`` files (never an import of vLLM, never a copy of its
code), so it runs in any interpreter: the conformance suite calls it for the pinned release,
``all_releases.sh`` for every release it can fetch. Each finder returns a :class:`Found`:
the value the rule needs, the file and the 1-based line it was read from, or ``value=None``
when the construct is absent (e.g. the #45100 guard before 0.24.0).

Run as a script: ``python release_rules.py TREE`` prints the facts as JSON.
"""

from __future__ import annotations

import ast
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

GMR = "vllm/v1/worker/gpu_model_runner.py"
MAMBA_UTILS = "vllm/v1/worker/mamba_utils.py"
ARG_UTILS = "vllm/engine/arg_utils.py"
MODEL_CFG = "vllm/config/model.py"
MODELS_CFG = "vllm/model_executor/models/config.py"
CACHE_CFG = "vllm/config/cache.py"
VLLM_CFG = "vllm/config/vllm.py"
SPEC_CFG = "vllm/config/speculative.py"
MRV2_MAMBA = "vllm/v1/worker/gpu/model_states/mamba_hybrid.py"
INPUT_BATCH = "vllm/v1/worker/gpu_input_batch.py"
PLATFORM = "vllm/platforms/interface.py"
QWEN_FILES = ("vllm/model_executor/models/qwen3_5.py", "vllm/model_executor/models/qwen3_next.py")
# The architectures our model presets resolve to (config.json of Qwen3.5 / Qwen3.6 / Qwen3-Next).
QWEN_ARCHS = (
    "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForConditionalGeneration",
    "Qwen3NextForCausalLM",
)


@dataclass(frozen=True)
class Found:
    value: Any
    file: str
    line: int  # 0 when absent

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Tree:
    """Parsed files of one unpacked release, cached."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._ast: dict[str, ast.Module] = {}

    def ast(self, rel: str) -> ast.Module:
        if rel not in self._ast:
            self._ast[rel] = ast.parse((self.root / rel).read_text(), filename=rel)
        return self._ast[rel]

    def exists(self, rel: str) -> bool:
        return (self.root / rel).is_file()

    def version(self) -> str:
        ns: dict[str, Any] = {}
        for node in self.ast("vllm/_version.py").body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                for t in node.targets:
                    for name in ast.walk(t):
                        if isinstance(name, ast.Name):
                            ns[name.id] = node.value.value
        return str(ns.get("__version__", "?"))


def _func(mod: ast.AST, name: str) -> ast.FunctionDef | None:
    for node in ast.walk(mod):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


def _class(mod: ast.AST, name: str) -> ast.ClassDef | None:
    for node in ast.walk(mod):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    return None


def _src(node: ast.AST) -> str:
    return ast.unparse(node)


# -- the accepted-count block (#45100) -------------------------------------------------------
def guard(t: Tree) -> Found:
    """``needs_cpu_accepted_counts = ...`` in ``_prepare_inputs`` (#45100), evaluated for every
    (async scheduling, mamba_cache_mode) with the event present: the value lists the
    combinations that still take the synchronised CPU path; None when absent (0.23.0, and
    0.34.0, which has no V1 runner at all)."""
    if not t.exists(GMR):
        return Found(None, GMR, 0)
    fn = _func(t.ast(GMR), "_prepare_inputs")
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and any(
            isinstance(x, ast.Name) and x.id == "needs_cpu_accepted_counts" for x in node.targets
        ):
            code = compile(ast.Expression(node.value), GMR, "eval")
            cpu_path = []
            for async_on in (False, True):
                for mode in ("align", "all", "none"):
                    runner = _Stub(
                        num_accepted_tokens_event=object(),
                        use_async_scheduling=async_on,
                        cache_config=_Stub(mamba_cache_mode=mode),
                    )
                    if eval(code, {"__builtins__": {}}, {"self": runner}):  # noqa: S307
                        cpu_path.append(f"async={async_on},mode={mode}")
            return Found(cpu_path, GMR, node.lineno)
    return Found(None, GMR, 0)


class _Stub:
    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)


def unguarded_sync(t: Tree) -> Found:
    """Pre-#45100: ``if self.num_accepted_tokens_event is not None:`` whose first statement is
    ``self.num_accepted_tokens_event.synchronize()`` (v0.23.0 L2021-2022). True when present."""
    if not t.exists(GMR):
        return Found(False, GMR, 0)
    fn = _func(t.ast(GMR), "_prepare_inputs")
    for node in ast.walk(fn):
        if (
            isinstance(node, ast.If)
            and _src(node.test) == "self.num_accepted_tokens_event is not None"
            and node.body
            and _src(node.body[0]) == "self.num_accepted_tokens_event.synchronize()"
        ):
            return Found(True, GMR, node.lineno)
    return Found(False, GMR, 0)


def _copy_into(fn: ast.AST, target_src: str) -> int:
    """Line of ``<target_src>[...].copy_(..., non_blocking=True)`` inside ``fn``, or 0."""
    for node in ast.walk(fn):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "copy_"
            and isinstance(node.func.value, ast.Subscript)
            and _src(node.func.value.value) == target_src
            and any(
                k.arg == "non_blocking" and getattr(k.value, "value", None) is True
                for k in node.keywords
            )
        ):
            return node.lineno
    return 0


def nonalign_d2h(t: Tree) -> Found:
    """The non-align branch D2H-copies non-blocking into the InputBatch's pinned tensor."""
    if not t.exists(GMR):
        return Found(False, GMR, 0)
    fn = _func(t.ast(GMR), "_update_states_after_model_execute")
    line = _copy_into(fn, "self.input_batch.num_accepted_tokens_cpu_tensor") if fn else 0
    return Found(bool(line), GMR, line)


def align_d2h(t: Tree) -> Found:
    """The align branch: the runner passes the InputBatch's pinned tensor to
    ``postprocess_mamba_align_gpu``, which copies into it non-blocking (mamba_utils.py)."""
    if not t.exists(GMR):
        return Found(False, MAMBA_UTILS, 0)
    fn = _func(t.ast(GMR), "_update_states_after_model_execute")
    passes = False
    for node in ast.walk(fn) if fn else ():
        if isinstance(node, ast.Call) and _src(node.func).endswith("postprocess_mamba_align_gpu"):
            passes = any(
                k.arg == "num_accepted_tokens_cpu_tensor"
                and _src(k.value) == "self.input_batch.num_accepted_tokens_cpu_tensor"
                for k in node.keywords
            )
    post = _func(t.ast(MAMBA_UTILS), "postprocess_mamba_align_gpu")
    line = _copy_into(post, "num_accepted_tokens_cpu_tensor") if post else 0
    return Found(passes and bool(line), MAMBA_UTILS, line)


# -- configuration defaults --------------------------------------------------------------------
def prefix_caching_default_hybrid(t: Tree) -> Found:
    """What ``enable_prefix_caching=None`` becomes for a generative hybrid model: evaluate the
    release's ``default_prefix_caching = ...`` expression (arg_utils.py) with
    ``is_prefix_caching_supported`` read from the hybrid branch of config/model.py."""
    supported = _hybrid_supports_prefix_caching(t)
    fn = _func(t.ast(ARG_UTILS), "_set_default_chunked_prefill_and_prefix_caching_args")
    mod = fn or t.ast(ARG_UTILS)
    for node in ast.walk(mod):
        if isinstance(node, ast.Assign) and any(
            isinstance(x, ast.Name) and x.id == "default_prefix_caching" for x in node.targets
        ):
            expr = ast.Expression(node.value)
            model_config = _Stub(is_prefix_caching_supported=supported, is_hybrid=True)
            code = compile(expr, ARG_UTILS, "eval")
            value = eval(code, {"__builtins__": {}}, {"model_config": model_config})  # noqa: S307
            return Found(bool(value), ARG_UTILS, node.lineno)
    return Found(None, ARG_UTILS, 0)


def _hybrid_supports_prefix_caching(t: Tree) -> bool:
    fn = _func(t.ast(MODEL_CFG), "is_prefix_caching_supported")
    for node in ast.walk(fn):
        if isinstance(node, ast.If) and _src(node.test) == "attn_type == 'hybrid'":
            for stmt in node.body:
                if isinstance(stmt, ast.Return):
                    return bool(stmt.value.value)
    raise ValueError("is_prefix_caching_supported: no hybrid branch")


def prefix_caching_hybrid_branch(t: Tree) -> Found:
    """Line of the hybrid branch of ``is_prefix_caching_supported`` (config/model.py)."""
    fn = _func(t.ast(MODEL_CFG), "is_prefix_caching_supported")
    for node in ast.walk(fn):
        if isinstance(node, ast.If) and _src(node.test) == "attn_type == 'hybrid'":
            return Found(_hybrid_supports_prefix_caching(t), MODEL_CFG, node.lineno)
    return Found(None, MODEL_CFG, 0)


def prefix_caching_mode(t: Tree) -> Found:
    """With prefix caching on and ``mamba_cache_mode == "none"``, what it becomes
    (MambaModelConfig.verify_and_update_config): ``"align"``, or ``"all|align"`` for the older
    ``"all" if supports_mamba_prefix_caching else "align"``."""
    cls = _class(t.ast(MODELS_CFG), "MambaModelConfig")
    for node in ast.walk(cls):
        if (
            isinstance(node, ast.If)
            and _src(node.test) == "cache_config.mamba_cache_mode == 'none'"
        ):
            for stmt in node.body:
                if isinstance(stmt, ast.Assign) and _src(stmt.targets[0]) == (
                    "cache_config.mamba_cache_mode"
                ):
                    v = stmt.value
                    if isinstance(v, ast.Constant):
                        return Found(v.value, MODELS_CFG, stmt.lineno)
                    if isinstance(v, ast.IfExp):
                        return Found(f"{v.body.value}|{v.orelse.value}", MODELS_CFG, stmt.lineno)
    return Found(None, MODELS_CFG, 0)


def all_falls_back_to_align(t: Tree) -> Found:
    """With prefix caching on, ``mamba_cache_mode == "all"`` on a model without
    ``SupportsMambaPrefixCaching`` becomes ``"align"``; None where the branch is gone."""
    cls = _class(t.ast(MODELS_CFG), "MambaModelConfig")
    for node in ast.walk(cls):
        if isinstance(node, ast.If) and _src(node.test) == (
            "cache_config.mamba_cache_mode == 'all' and "
            "(not model_config.supports_mamba_prefix_caching)"
        ):
            for stmt in node.body:
                if isinstance(stmt, ast.Assign) and _src(stmt.targets[0]) == (
                    "cache_config.mamba_cache_mode"
                ):
                    return Found(stmt.value.value, MODELS_CFG, node.lineno)
    return Found(None, MODELS_CFG, 0)


def prefix_caching_off_forces_none(t: Tree) -> Found:
    """With prefix caching off, any ``mamba_cache_mode`` other than ``"none"`` is set back to
    ``"none"`` (the else branch of ``if cache_config.enable_prefix_caching``)."""
    cls = _class(t.ast(MODELS_CFG), "MambaModelConfig")
    for node in ast.walk(cls):
        if isinstance(node, ast.If) and _src(node.test) == "cache_config.enable_prefix_caching":
            for stmt in node.orelse:
                if (
                    isinstance(stmt, ast.If)
                    and _src(stmt.test) == "cache_config.mamba_cache_mode != 'none'"
                    and _src(stmt.body[0]) == "cache_config.mamba_cache_mode = 'none'"
                ):
                    return Found(True, MODELS_CFG, stmt.lineno)
    return Found(False, MODELS_CFG, 0)


def spec_event(t: Tree) -> Found:
    """``num_accepted_tokens_event`` is created only under an ``if`` on speculative tokens:
    without speculative decoding there is no count to copy and nothing to race. None where
    the V1 runner is gone (0.34.0)."""
    if not t.exists(GMR):
        return Found(None, GMR, 0)
    fn = _func(_class(t.ast(GMR), "GPUModelRunner"), "__init__")
    for node in ast.walk(fn):
        if isinstance(node, ast.If) and any(
            isinstance(s, ast.Assign)
            and _src(s.targets[0]) == "self.num_accepted_tokens_event"
            and isinstance(s.value, ast.Call)
            for s in node.body
        ):
            return Found(_src(node.test), GMR, node.lineno)
    return Found(None, GMR, 0)


def qwen_mamba_prefix_caching(t: Tree) -> Found:
    """Whether any Qwen3.5/Qwen3-Next model class lists ``SupportsMambaPrefixCaching`` (which
    would make the older releases pick ``"all"``)."""
    for rel in QWEN_FILES:
        for node in ast.walk(t.ast(rel)):
            if isinstance(node, ast.ClassDef) and any(
                _src(b) == "SupportsMambaPrefixCaching" for b in node.bases
            ):
                return Found(True, rel, node.lineno)
    return Found(False, QWEN_FILES[0], 0)


def mamba_cache_modes(t: Tree) -> Found:
    """The values of ``MambaCacheMode = Literal[...]`` (config/cache.py)."""
    for node in t.ast(CACHE_CFG).body:
        if isinstance(node, ast.Assign) and _src(node.targets[0]) == "MambaCacheMode":
            sl = node.value.slice
            elts = sl.elts if isinstance(sl, ast.Tuple) else [sl]
            return Found(sorted(e.value for e in elts), CACHE_CFG, node.lineno)
    return Found(None, CACHE_CFG, 0)


def _property(t: Tree, name: str) -> ast.FunctionDef:
    fn = _maybe_property(t, name)
    if fn is None:
        raise ValueError(f"VllmConfig.{name} not found")
    return fn


def _maybe_property(t: Tree, *names: str) -> ast.FunctionDef | None:
    """The first of ``names`` that ``VllmConfig`` defines, or None."""
    cls = _class(t.ast(VLLM_CFG), "VllmConfig")
    for name in names:
        for node in cls.body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                return node
    return None


# 0.34.0 renamed MRv2's list of unsupported features when MRv2 became the only runner.
UNSUPPORTED_FNS = (
    "_get_v2_model_runner_unsupported_features",
    "_get_model_runner_unsupported_features",
)


def mrv2_default_for_qwen(t: Tree) -> Found:
    """Whether ``use_v2_model_runner`` defaults to MRv2 for a Qwen3.5/Qwen3-Next + MTP config
    with nothing unsupported: False when it first requires ``_is_default_v2_model_runner_model``
    and the default-architecture list names none of the Qwen hybrid architectures. None where
    the property is gone (0.34.0: there is no runner left to choose)."""
    fn = _maybe_property(t, "use_v2_model_runner")
    if fn is None:
        return Found(None, VLLM_CFG, 0)
    calls = any(
        isinstance(n, ast.Attribute) and n.attr == "_is_default_v2_model_runner_model"
        for n in ast.walk(fn)
    )
    if not calls:
        return Found(True, VLLM_CFG, fn.lineno)
    for node in t.ast(VLLM_CFG).body:
        if isinstance(node, ast.Assign) and _src(node.targets[0]) == (
            "DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES"
        ):
            v = node.value.args[0] if isinstance(node.value, ast.Call) else node.value
            archs = set(ast.literal_eval(v))
            return Found(bool(archs & set(QWEN_ARCHS)), VLLM_CFG, node.lineno)
    return Found(False, VLLM_CFG, fn.lineno)


def mrv2_env_override(t: Tree) -> Found:
    """``VLLM_USE_V2_MODEL_RUNNER`` set (0 or 1) decides ``use_v2_model_runner`` before any
    default: the property returns it as soon as it is not None. None where the property is
    gone (0.34.0: ``v1_env_raises`` says what the variable does there)."""
    fn = _maybe_property(t, "use_v2_model_runner")
    if fn is None:
        return Found(None, VLLM_CFG, 0)
    for node in ast.walk(fn):
        if (
            isinstance(node, ast.Assign)
            and _src(node.value) == "envs.VLLM_USE_V2_MODEL_RUNNER"
            and _src(node.targets[0]) == "use_v2_model_runner"
        ):
            return Found(True, VLLM_CFG, node.lineno)
    return Found(False, VLLM_CFG, 0)


def mrv2_supports_mtp(t: Tree) -> Found:
    """``_get_v2_model_runner_unsupported_features`` does not list MTP: either a
    ``method not in (...)`` whitelist names ``"mtp"``, or no branch names it as unsupported.
    0.34.0: the same for ``_get_model_runner_unsupported_features`` (the only runner's list)."""
    fn = _maybe_property(t, *UNSUPPORTED_FNS)
    if fn is None:
        return Found(None, VLLM_CFG, 0)
    for node in ast.walk(fn):
        if isinstance(node, ast.Compare) and _src(node.left) == "speculative_config.method":
            op, right = node.ops[0], node.comparators[0]
            if isinstance(right, ast.Tuple):
                names = {e.value for e in right.elts if isinstance(e, ast.Constant)}
                if isinstance(op, ast.NotIn) and len(names) > 2:
                    return Found("mtp" in names, VLLM_CFG, node.lineno)
                if isinstance(op, ast.In) and "mtp" in names:
                    return Found(False, VLLM_CFG, node.lineno)
    return Found(True, VLLM_CFG, fn.lineno)


def mrv2_unsupported_features(t: Tree) -> Found:
    """The fixed feature names ``_get_v2_model_runner_unsupported_features`` appends (also
    those of helpers it extends with, e.g. 0.33.0's ``_get_dbo_unsupported_features``): any of
    them in a configuration makes ``use_v2_model_runner`` fall back to MRv1. 0.34.0: the list of
    ``_get_model_runner_unsupported_features``, where any of them makes vLLM refuse to start
    (``model_runner_validation_raises``)."""
    fn = _maybe_property(t, *UNSUPPORTED_FNS)
    if fn is None:
        return Found(None, VLLM_CFG, 0)
    names = set(_appended_names(fn))
    for n in ast.walk(fn):
        if (
            isinstance(n, ast.Call)
            and _src(n.func) == "unsupported.extend"
            and isinstance(n.args[0], ast.Call)
            and isinstance(n.args[0].func, ast.Attribute)
        ):
            helper = _property(t, n.args[0].func.attr)
            names |= set(_appended_names(helper))
            for r in ast.walk(helper):
                if isinstance(r, ast.Return) and isinstance(r.value, ast.List):
                    names |= {e.value for e in r.value.elts if isinstance(e, ast.Constant)}
    return Found(sorted(names), VLLM_CFG, fn.lineno)


def _appended_names(fn: ast.AST) -> list[str]:
    return [
        n.args[0].value
        for n in ast.walk(fn)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "append"
        and n.args
        and isinstance(n.args[0], ast.Constant)
        and isinstance(n.args[0].value, str)
    ]


def mrv2_validation_raises(t: Tree) -> Found:
    """With MRv2 chosen (e.g. ``VLLM_USE_V2_MODEL_RUNNER=1``) and any unsupported feature,
    ``_validate_v2_model_runner`` raises ``ValueError`` (vLLM refuses to start) instead of
    falling back. None where the method is gone (0.34.0: ``model_runner_validation_raises``)."""
    fn = _maybe_property(t, "_validate_v2_model_runner")
    if fn is None:
        return Found(None, VLLM_CFG, 0)
    for node in ast.walk(fn):
        if (
            isinstance(node, ast.If)
            and _src(node.test) == "unsupported"
            and isinstance(node.body[0], ast.Raise)
            and _src(node.body[0].exc.func) == "ValueError"
        ):
            return Found(True, VLLM_CFG, node.lineno)
    return Found(False, VLLM_CFG, fn.lineno)


def async_default_on_with_mtp(t: Tree) -> Found:
    """``async_scheduling=None`` ends in ``= True`` unless an exception applies, and MTP is an
    EAGLE-type method (config/speculative.py), so none of the spec exceptions applies."""
    mtp_is_eagle = False
    for node in t.ast(SPEC_CFG).body:
        if isinstance(node, ast.Assign) and _src(node.targets[0]) == "EagleModelTypes":
            mtp_is_eagle = "MTPModelTypes" in _src(node.value) or "'mtp'" in _src(node.value)
    fn = _func(_class(t.ast(VLLM_CFG), "VllmConfig"), "__post_init__")
    for node in ast.walk(fn):
        if isinstance(node, ast.If) and _src(node.test) == (
            "self.scheduler_config.async_scheduling is None"
        ):
            for stmt in ast.walk(node):
                if (
                    isinstance(stmt, ast.Assign)
                    and _src(stmt.targets[0]) == "self.scheduler_config.async_scheduling"
                    and getattr(stmt.value, "value", None) is True
                ):
                    return Found(mtp_is_eagle, VLLM_CFG, stmt.lineno)
    return Found(None, VLLM_CFG, 0)


def mrv2_counts_on_gpu(t: Tree) -> Found:
    """MRv2 (model_states/mamba_hybrid.py): the accepted counts are a GPU tensor
    ``num_accepted_tokens_gpu`` indexed by request-state slot, and the file does no
    non-blocking copy at all (nothing lands in a CPU buffer rows could move)."""
    if not t.exists(MRV2_MAMBA):
        return Found(None, MRV2_MAMBA, 0)
    mod = t.ast(MRV2_MAMBA)
    line = 0
    for node in ast.walk(mod):
        if isinstance(node, ast.Assign) and _src(node.targets[0]) == "self.num_accepted_tokens_gpu":
            line = node.lineno
    d2h = any(isinstance(n, ast.keyword) and n.arg == "non_blocking" for n in ast.walk(mod))
    return Found(bool(line) and not d2h, MRV2_MAMBA, line)


def mrv2_align_snapshot(t: Tree) -> Found:
    """MRv2 align (#50432): ``run_fused_postprocess_align`` (mamba_utils.py) first copies the
    counts into a device snapshot, ``<snapshot>.copy_(num_accepted_tokens_gpu)``, which the
    fused kernel reads while it resets the live buffer. True at the copy's line; False where
    the kernel reads the live counts it updates (0.25.0-0.27.1); None without the fused
    kernel (0.23.0, 0.24.0)."""
    fn = _func(t.ast(MAMBA_UTILS), "run_fused_postprocess_align")
    if fn is None:
        return Found(None, MAMBA_UTILS, 0)
    for node in ast.walk(fn):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "copy_"
            and isinstance(node.func.value, ast.Name)
            and [_src(a) for a in node.args] == ["num_accepted_tokens_gpu"]
        ):
            return Found(True, MAMBA_UTILS, node.lineno)
    return Found(False, MAMBA_UTILS, 0)


# -- the V1 runner, and its removal in 0.34.0 --------------------------------------------------
def _top_level(t: Tree, rel: str, kind: type, name: str) -> Found:
    """True at the line of ``rel``'s top-level ``class``/``def`` ``name``; False (line 0) when
    the file or the definition is absent."""
    if not t.exists(rel):
        return Found(False, rel, 0)
    for node in t.ast(rel).body:
        if isinstance(node, kind) and node.name == name:
            return Found(True, rel, node.lineno)
    return Found(False, rel, 0)


def v1_runner_present(t: Tree) -> Found:
    """``class GPUModelRunner`` in ``vllm/v1/worker/gpu_model_runner.py``: the V1 runner, whose
    align D2H lands in the InputBatch buffer. False in 0.34.0 (the file is gone)."""
    return _top_level(t, GMR, ast.ClassDef, "GPUModelRunner")


def v1_input_batch_present(t: Tree) -> Found:
    """``class InputBatch`` in ``vllm/v1/worker/gpu_input_batch.py``: the row-indexed pinned
    ``num_accepted_tokens_cpu`` the CPU rearranges. False in 0.34.0 (the file is gone)."""
    return _top_level(t, INPUT_BATCH, ast.ClassDef, "InputBatch")


def v1_preprocess_mamba_present(t: Tree) -> Found:
    """``def preprocess_mamba`` (mamba_utils.py): the V1 align consumer of the CPU counts.
    False in 0.34.0."""
    return _top_level(t, MAMBA_UTILS, ast.FunctionDef, "preprocess_mamba")


def v1_postprocess_align_present(t: Tree) -> Found:
    """``def postprocess_mamba_align_gpu`` (mamba_utils.py): the V1 align producer, the
    non-blocking D2H into the InputBatch tensor. False in 0.34.0."""
    return _top_level(t, MAMBA_UTILS, ast.FunctionDef, "postprocess_mamba_align_gpu")


def _message(node: ast.expr) -> str:
    """A string or f-string literal as text, ``{expr}`` for each formatted part."""
    if isinstance(node, ast.Constant):
        return str(node.value)
    if isinstance(node, ast.JoinedStr):
        return "".join(
            str(v.value) if isinstance(v, ast.Constant) else "{" + _src(v.value) + "}"
            for v in node.values
            if isinstance(v, (ast.Constant, ast.FormattedValue))
        )
    return _src(node)


def v1_env_raises(t: Tree) -> Found:
    """``Platform.validate_environ`` (platforms/interface.py, 0.34.0): ``VLLM_USE_V2_MODEL_RUNNER``
    set to anything but ``1`` raises ``ValueError`` saying Model Runner V1 has been removed.
    The value is the message (``{value}`` for the variable's value), the line the ``if`` on the
    variable's name; None where no such check exists (0.23.0-0.33.0: the variable chooses)."""
    fn = _func(t.ast(PLATFORM), "validate_environ")
    for node in ast.walk(fn) if fn else ():
        if isinstance(node, ast.If) and _src(node.test) == "env == 'VLLM_USE_V2_MODEL_RUNNER'":
            for inner in node.body:
                if (
                    isinstance(inner, ast.If)
                    and _src(inner.test) == "value != '1'"
                    and isinstance(inner.body[0], ast.Raise)
                    and isinstance(inner.body[0].exc, ast.Call)
                    and _src(inner.body[0].exc.func) == "ValueError"
                ):
                    msg = _message(inner.body[0].exc.args[0])
                    if "Model Runner V1 has been removed" in msg:
                        return Found(msg, PLATFORM, node.lineno)
    return Found(None, PLATFORM, 0)


def model_runner_validation_raises(t: Tree) -> Found:
    """``VllmConfig._validate_model_runner`` (0.34.0): any feature of
    ``_get_model_runner_unsupported_features`` raises ``ValueError``; there is no runner left to
    fall back to. True at the ``if unsupported:`` line; None where the method does not exist
    (0.23.0-0.33.0 choose a runner instead, ``mrv2_unsupported_features``)."""
    fn = _maybe_property(t, "_validate_model_runner")
    for node in ast.walk(fn) if fn else ():
        if (
            isinstance(node, ast.If)
            and _src(node.test) == "unsupported"
            and isinstance(node.body[0], ast.Raise)
            and _src(node.body[0].exc.func) == "ValueError"
        ):
            return Found(True, VLLM_CFG, node.lineno)
    return Found(None, VLLM_CFG, 0)


# -- the scheduler (tests/conformance/test_conformance_scheduler.py holds sim to it) ----------
SCHED = "vllm/v1/core/sched/scheduler.py"


def avoid_extra_step(t: Tree) -> Found:
    """``schedule()`` skips a running request whose in-flight step is sure to reach
    ``max_tokens``: an ``if`` testing ``num_output_placeholders > 0`` and
    ``num_computed_tokens + 2 - num_output_placeholders >= num_prompt_tokens + max_tokens``
    whose body ends in ``continue`` (sim.model.scheduler_rules.sure_to_finish). True when present;
    the line is the condition's."""
    fn = _func(t.ast(SCHED), "schedule")
    for node in ast.walk(fn):
        if isinstance(node, ast.If):
            test = _src(node.test).replace(" ", "")
            if (
                "request.num_output_placeholders>0" in test
                and "request.num_computed_tokens+2-request.num_output_placeholders>=" in test
                and "request.num_prompt_tokens+request.max_tokens" in test
                and isinstance(node.body[-1], ast.Continue)
            ):
                return Found(True, SCHED, node.test.lineno)
    return Found(False, SCHED, 0)


def mamba_split_rule(t: Tree) -> Found:
    """How ``_mamba_block_aligned_split`` cuts a chunk (engine.mamba_split_rule): ``"chunk"``
    when it floors ``num_new_tokens`` to whole blocks (0.23.0-0.25.1), ``"boundary"`` when it
    collects ``stops`` (chunk ends on block boundaries, 0.26.0 on), ``"lookahead"`` when
    besides ``__init__`` turns the EAGLE block drop off for lookahead block hashes (0.33.0);
    the line is the function's."""
    fn = _func(t.ast(SCHED), "_mamba_block_aligned_split")
    if fn is None:
        return Found(None, SCHED, 0)
    names = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
    floors = "num_new_tokens//block_size*block_size" in _src(fn).replace(" ", "")
    init = _src(_func(t.ast(SCHED), "__init__")).replace(" ", "")
    if "stops" in names and "ifself.num_hash_lookahead_tokens:" in init:
        # 0.33.0: lookahead block hashes replace the EAGLE block drop (prefix caching on)
        return Found("lookahead", SCHED, fn.lineno)
    if "stops" in names:
        return Found("boundary", SCHED, fn.lineno)
    return Found("chunk" if floors else None, SCHED, fn.lineno)


def pad_new_decode(t: Tree) -> Found:
    """Whether ``schedule()`` pads a waiting request with one token left to ``1 + k`` tokens
    (``pad_spec_decode``; engine.pad_new_decode): ``"off"`` when absent, ``"running"`` when the
    condition needs scheduled running requests, ``"running_or_hit"`` when it also accepts
    ``num_computed_tokens > 0``; the line is the condition's."""
    fn = _func(t.ast(SCHED), "schedule")
    for node in ast.walk(fn):
        if isinstance(node, ast.If):
            test = _src(node.test).replace(" ", "")
            if "num_new_tokens==1" in test and "notprefill_scheduled" in test:
                hit = "num_computed_tokens>0" in test
                return Found("running_or_hit" if hit else "running", SCHED, node.test.lineno)
    return Found("off", SCHED, 0)


FINDERS = {
    "guard_45100": guard,
    "unguarded_sync": unguarded_sync,
    "nonalign_d2h_into_input_batch": nonalign_d2h,
    "align_d2h_into_input_batch": align_d2h,
    "prefix_caching_default_hybrid": prefix_caching_default_hybrid,
    "prefix_caching_hybrid_supported": prefix_caching_hybrid_branch,
    "prefix_caching_none_becomes": prefix_caching_mode,
    "qwen_supports_mamba_prefix_caching": qwen_mamba_prefix_caching,
    "all_falls_back_to_align": all_falls_back_to_align,
    "prefix_caching_off_forces_none": prefix_caching_off_forces_none,
    "spec_event": spec_event,
    "mamba_cache_modes": mamba_cache_modes,
    "mrv2_default_for_qwen": mrv2_default_for_qwen,
    "mrv2_env_override": mrv2_env_override,
    "mrv2_supports_mtp": mrv2_supports_mtp,
    "mrv2_unsupported_features": mrv2_unsupported_features,
    "mrv2_validation_raises": mrv2_validation_raises,
    "async_default_on_with_mtp": async_default_on_with_mtp,
    "mrv2_counts_on_gpu": mrv2_counts_on_gpu,
    "mrv2_align_snapshot": mrv2_align_snapshot,
    "v1_runner_present": v1_runner_present,
    "v1_input_batch_present": v1_input_batch_present,
    "v1_preprocess_mamba_present": v1_preprocess_mamba_present,
    "v1_postprocess_align_present": v1_postprocess_align_present,
    "v1_env_raises": v1_env_raises,
    "model_runner_validation_raises": model_runner_validation_raises,
    "avoid_extra_step": avoid_extra_step,
    "mamba_split_rule": mamba_split_rule,
    "pad_new_decode": pad_new_decode,
}


def read_facts(root: Path) -> dict[str, dict[str, Any]]:
    t = Tree(root)
    return {name: f(t).to_dict() for name, f in FINDERS.items()}


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def compare(root: Path) -> dict[str, Any]:
    """Each fact sim.resolve relies on for this release, as its source has it now: ``held``
    when value, file and line all agree, with the rules that rest on it."""
    from sim.resolve.release_facts import FACTS
    from sim.resolve.rules import RULES

    tree = Tree(root)
    version = tree.version()
    found = read_facts(root)
    out: dict[str, Any] = {}
    for name in sorted(FINDERS):
        want = FACTS.get(name, {}).get(version)
        got = found[name]
        held = want is not None and (
            _plain(want.value) == got["value"]
            and want.file == got["file"]
            and want.line == got["line"]
        )
        out[name] = {
            "held": held,
            "rules": sorted(r.id for r in RULES.values() if r.fact == name),
            "source": got,
            "expected": None
            if want is None
            else {"value": _plain(want.value), "file": want.file, "line": want.line},
        }
    return {"version": version, "all_held": all(v["held"] for v in out.values()), "facts": out}


if __name__ == "__main__":
    # release_rules.py TREE            the facts as the release's source has them
    # release_rules.py --compare TREE  the same beside sim.resolve's committed facts
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's sim
    if sys.argv[1] == "--compare":
        print(json.dumps(compare(Path(sys.argv[2])), indent=1, sort_keys=True))
    else:
        tree = Tree(Path(sys.argv[1]))
        out = {"version": tree.version(), "facts": read_facts(Path(sys.argv[1]))}
        print(json.dumps(out, indent=1, sort_keys=True))
