"""The one exception type the CLI turns into a single error line."""


class SpecraceError(Exception):
    """A user-facing error: bad scenario, unknown policy, unreadable run directory.

    The CLI prints ``error: <message>`` and exits non-zero; it never shows a traceback
    for this type.
    """
