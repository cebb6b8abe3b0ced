"""Stand-in for ``lmformatenforcer`` (a structured-output backend, not in the conformance env):
vLLM's backend_lm_format_enforcer.py names ``TokenEnforcer`` in a dataclass field at import
time. No request under test uses structured output."""


class TokenEnforcer:
    pass
