"""Stand-in for ``fastapi`` (not in the conformance env): from 0.33.0 vLLM's structured-output
package imports the OpenAI-server protocol, whose package imports ``FastAPI`` at import time.
Any name is an empty class; no server runs."""


def __getattr__(name: str) -> type:
    if name.startswith("__"):
        raise AttributeError(name)
    return type(name, (), {})
