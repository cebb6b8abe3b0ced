"""``sweep --scheduler ADDRESS``: the address parsed, and the endpoint held to Dask's protocol,
before anything is written.

Whatever is at the address, the answer is a connected client or one line within
:data:`DEADLINE_S`: a malformed or empty address, a host that does not resolve, a closed port,
an endpoint that answers nothing, or one that answers something other than a Dask handshake
(handing such an endpoint to Dask made it read a garbage frame length and try to allocate
3 EiB). A Dask scheduler writes its handshake as soon as a connection opens: a u64 total length,
a u64 frame count, the frame lengths, then a msgpack map that names ``pickle-protocol``.
"""

from __future__ import annotations

import contextlib
import logging
import re
import socket
import struct
import threading
import time
from typing import Any

from sim.errors import SpecraceError

DEADLINE_S = 10.0
PROBE_S = 3.0  # connect, and the first bytes of the scheduler's handshake
SCHEMES = ("tcp", "tls")
_HOST = re.compile(r"\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+")


def parse_address(text: str) -> tuple[str, str, int]:
    """``[tcp://|tls://]HOST:PORT`` -> (scheme, host, port), or one line on what is wrong."""
    shown = f"--scheduler {text!r}"
    if not text.strip():
        raise SpecraceError("--scheduler is empty: give a Dask scheduler's address, e.g. "
                            "tcp://127.0.0.1:8786")  # fmt: skip
    scheme, sep, rest = text.strip().partition("://")
    if not sep:
        scheme, rest = "tcp", text.strip()
    if scheme not in SCHEMES:
        raise SpecraceError(f"{shown}: protocol {scheme!r} is not one of {', '.join(SCHEMES)}")
    host, colon, port = rest.rpartition(":")
    if not colon or not _HOST.fullmatch(host) or not port.isascii() or not port.isdigit():
        raise SpecraceError(f"{shown}: expected [tcp://]HOST:PORT, e.g. tcp://127.0.0.1:8786")
    if not 1 <= int(port) <= 65535:
        raise SpecraceError(f"{shown}: port {int(port)} is not in 1..65535")
    return scheme, host.strip("[]"), int(port)


def connect(text: str, timeout_s: float = DEADLINE_S) -> Any:
    """A ``distributed.Client`` of the scheduler at ``text``, or one line within ``timeout_s``."""
    scheme, host, port = parse_address(text)
    try:
        from distributed import Client
    except ImportError:
        raise SpecraceError(
            "parallel sweeps need Dask: pip install 'specrace[dask]' (or --workers 1)"
        ) from None
    start = time.monotonic()
    if scheme == "tcp":
        _probe(text, host, port)
    left = max(1.0, timeout_s - (time.monotonic() - start) - 1.0)
    quiet = logging.getLogger("distributed")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL + 1)  # its warnings would be more lines than our one
    try:
        return Client(f"{scheme}://{_bracket(host)}:{port}", timeout=f"{left:.0f}s")
    except Exception as e:  # noqa: BLE001 - whatever Dask raises is one line here
        raise SpecraceError(f"--scheduler {text}: cannot talk to a Dask scheduler there "
                            f"({type(e).__name__}: {str(e)[:200]})") from None  # fmt: skip
    finally:
        quiet.setLevel(level)


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _probe(text: str, host: str, port: int) -> None:
    """Connect and read the first bytes, in a thread bounded by :data:`PROBE_S` (a resolver
    that hangs included)."""
    result: list[str | None] = []

    def run() -> None:
        result.append(_handshake_problem(host, port))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(2 * PROBE_S)
    problem = result[0] if result else f"no answer within {2 * PROBE_S:.0f} s"
    if problem:
        raise SpecraceError(f"--scheduler {text}: {problem}")


def _handshake_problem(host: str, port: int) -> str | None:
    """None if ``host:port`` opens with a Dask handshake, else what it did instead."""
    try:
        conn = socket.create_connection((host, port), timeout=PROBE_S)
    except socket.gaierror:
        return f"unknown host {host!r}"
    except ConnectionRefusedError:
        return "nothing listens there (connection refused)"
    except TimeoutError:
        return f"no connection within {PROBE_S:.0f} s"
    except OSError as e:
        return f"cannot connect ({e.strerror or e})"
    data = b""
    with contextlib.closing(conn):
        conn.settimeout(PROBE_S)
        deadline = time.monotonic() + PROBE_S
        try:
            while len(data) < 1024 and time.monotonic() < deadline:
                chunk = conn.recv(1024 - len(data))
                if not chunk:
                    break
                data += chunk
                if len(data) >= 8 and len(data) >= 8 + struct.unpack("<Q", data[:8])[0]:
                    break  # the whole handshake message
        except (TimeoutError, OSError):
            pass
    if not data:
        return f"the endpoint sent nothing within {PROBE_S:.0f} s: not a Dask scheduler"
    total, frames = struct.unpack("<QQ", data[:16]) if len(data) >= 16 else (0, 0)
    if not (0 < total <= 1 << 20 and 1 <= frames <= 64 and b"pickle-protocol" in data):
        return "the endpoint does not speak Dask's protocol (no Dask handshake)"
    return None
