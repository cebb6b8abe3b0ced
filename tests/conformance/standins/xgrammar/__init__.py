"""Stand-in for ``xgrammar`` (a structured-output backend, not in the conformance env):
vLLM's backend_xgrammar.py names these classes in dataclass fields at import time. No request
under test uses structured output."""


class GrammarMatcher:
    pass


class CompiledGrammar:
    pass
