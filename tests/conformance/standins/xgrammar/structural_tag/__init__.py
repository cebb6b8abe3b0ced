"""Stand-in submodule of ``xgrammar`` (see the package): any name is an empty class."""


def __getattr__(name: str) -> type:
    if name.startswith("__"):
        raise AttributeError(name)
    return type(name, (), {})
