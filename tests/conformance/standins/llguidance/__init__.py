"""Stand-in for ``llguidance`` (the guidance structured-output backend, not in the conformance
env): vLLM's backend_guidance.py names these classes in dataclass annotations at import time.
No request under test uses structured output."""


class LLMatcher:
    pass


class LLTokenizer:
    pass


class LLInterpreter:
    pass
