"""Stand-in for ``outlines_core`` (a structured-output backend, not in the conformance env):
vLLM's backend_outlines.py names ``Guide`` in a dataclass field at import time. No request
under test uses structured output."""


class Guide:
    pass
