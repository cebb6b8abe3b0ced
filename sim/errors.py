"""The one exception type the CLI turns into a single error line."""


class SpecraceError(Exception):
    """A user-facing error: bad scenario, unknown policy, unreadable run directory.

    The CLI prints ``error: <message>`` and exits non-zero; it never shows a traceback
    for this type.
    """


def one_line(message: object) -> str:
    """The message on one printable line: control characters a user typed (or a file held) are
    shown escaped, so an error can never spill over several lines."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(message))
