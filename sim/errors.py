"""The one exception type the CLI turns into a single error line, and what such a line says."""

from collections.abc import Iterable


class SpecraceError(Exception):
    """A user-facing error: bad scenario, unknown policy, unreadable run directory.

    The CLI prints ``error: <message>`` and exits non-zero; it never shows a traceback
    for this type.
    """


def one_line(message: object) -> str:
    """The message on one printable line: control characters a user typed (or a file held) are
    shown escaped, so an error can never spill over several lines."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(message))


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """``"; did you mean X?"`` for the candidates a mistyped ``word`` is close to (difflib, and
    a candidate the word begins or, lower-cased and without a ``org/`` prefix, names), else
    ``""``: an error line a user can act on. ``0.28`` -> ``0.28.0``; ``Qwen/Qwen3.5-27B`` ->
    ``qwen3.5-27b``."""
    import difflib

    names = list(candidates)
    bare = word.rsplit("/", 1)[-1].lower()
    close = [c for c in names if c.lower() == bare and c != word]
    close += [c for c in names if c.startswith(word + ".") and c not in close]
    if not close:  # a typo: only what is very close (0.99.0 is not a typo of 0.29.0)
        close = difflib.get_close_matches(bare, names, n=3, cutoff=0.85)
    return f"; did you mean {', '.join(close[:3])}?" if close else ""
