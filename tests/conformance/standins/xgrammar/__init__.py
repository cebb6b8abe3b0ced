"""Stand-in for ``xgrammar`` (a structured-output backend, not in the conformance env):
vLLM names its classes at import time (backend_xgrammar.py dataclass fields; from 0.33.0 also
vllm/parser/*.py imports). Any name is an empty class. No request under test uses structured
output."""


def __getattr__(name: str) -> type:
    if name.startswith("__"):
        raise AttributeError(name)
    return type(name, (), {})
