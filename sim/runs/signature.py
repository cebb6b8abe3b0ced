"""The signature specrace embeds in a single output file: proof, by content hash, that specrace
wrote the file and nobody changed it since.

A file that lives in a marked output folder is proved by that folder's manifest
(``sim.runs.outputs``); a file written anywhere else (``sim report --out F``, ``sim plot --out
F.png``, ``check --out F.json``) carries its proof inside, in a place its format ignores:

- PNG: a ``tEXt`` chunk ``specrace-sha256`` just before ``IEND``;
- HTML, SVG, Markdown, XML: a last line ``<!-- specrace-sha256:HEX -->``;
- TOML, Python, plain text: a last line ``# specrace-sha256:HEX``;
- JSON (an object): a key ``specrace_sha256``, the hash of the canonical JSON of the rest.

HEX is the SHA-256 of the file without its signature. A keyword in a file proves nothing (any
file may mention matplotlib); a hash of the file's own content breaks on any edit, so a file
the user changed after specrace wrote it is theirs and is never overwritten.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
import zlib
from pathlib import Path

KEY = "specrace-sha256"
JSON_KEY = "specrace_sha256"
_PNG = b"\x89PNG\r\n\x1a\n"
_XML_LIKE = {".html", ".htm", ".svg", ".md", ".xml"}
_HASH_LINE = {".toml", ".py", ".txt"}
_TRAILER = re.compile(rb"(?s)\A(?P<body>.*)(?:<!-- |# )specrace-sha256:(?P<hex>[0-9a-f]{64})"
                      rb"(?: -->)?\n\Z")  # fmt: skip
READ_MAX = 256 * 2**20  # a signed file larger than this is not read to be checked


def sign(data: bytes, path: Path, fmt: str = "") -> bytes:
    """``data`` with its signature embedded, in the way of its format: ``fmt`` (a suffix such
    as ".json", given by the writer, who knows what it wrote), else ``path``'s suffix."""
    suffix = (fmt or path.suffix).lower()
    if suffix == ".png":
        return _sign_png(data)
    if suffix == ".json":
        doc = json.loads(data)
        if not isinstance(doc, dict):
            raise ValueError(f"{path.name}: only a JSON object can carry a signature")
        doc.pop(JSON_KEY, None)
        text = json.dumps({**doc, JSON_KEY: _json_hash(doc)}, indent=1, sort_keys=True)
        return (text + "\n").encode()
    if suffix in _XML_LIKE or suffix in _HASH_LINE:
        m = _TRAILER.match(data)
        data = m["body"] if m else data  # signing a signed file again changes nothing
        body = data if data.endswith(b"\n") or not data else data + b"\n"
        digest = hashlib.sha256(body).hexdigest()
        line = f"<!-- {KEY}:{digest} -->\n" if suffix in _XML_LIKE else f"# {KEY}:{digest}\n"
        return body + line.encode()
    raise ValueError(f"{path.name}: specrace cannot sign a {suffix or 'suffix-less'} file "
                     "(name the format)")  # fmt: skip


def is_signed(path: Path) -> bool:
    """Whether ``path`` is a regular file whose embedded signature matches its content. The
    content says where to look (a PNG's chunks, a last line, a JSON key), not the name."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > READ_MAX:
            return False
        data = path.read_bytes()
    except OSError:
        return False
    if data.startswith(_PNG):
        return _png_signed(data)
    m = _TRAILER.match(data)
    if m is not None:
        return hashlib.sha256(m["body"]).hexdigest() == m["hex"].decode()
    if JSON_KEY.encode() not in data:
        return False
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return False
    if not isinstance(doc, dict) or not isinstance(doc.get(JSON_KEY), str):
        return False
    want = doc.pop(JSON_KEY)
    return want == _json_hash(doc)


def _json_hash(doc: object) -> str:
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _chunks(data: bytes) -> list[tuple[bytes, bytes]] | None:
    """A PNG's chunks as (type, the whole chunk's bytes), or None if it is not a whole PNG."""
    if not data.startswith(_PNG):
        return None
    out, i = [], len(_PNG)
    while i + 12 <= len(data):
        (n,) = struct.unpack(">I", data[i : i + 4])
        end = i + 12 + n
        if end > len(data):
            return None
        out.append((data[i + 4 : i + 8], data[i:end]))
        i = end
    if i != len(data) or not out or out[-1][0] != b"IEND":
        return None
    return out


def _is_ours(chunk: tuple[bytes, bytes]) -> bool:
    return chunk[0] == b"tEXt" and chunk[1][8:].startswith(KEY.encode() + b"\0")


def _sign_png(data: bytes) -> bytes:
    chunks = _chunks(data)
    if chunks is None:
        raise ValueError("not a whole PNG")
    rest = [c for c in chunks if not _is_ours(c)]
    body = _PNG + b"".join(c[1] for c in rest)
    payload = KEY.encode() + b"\0" + hashlib.sha256(body).hexdigest().encode()
    chunk = (struct.pack(">I", len(payload)) + b"tEXt" + payload
             + struct.pack(">I", zlib.crc32(b"tEXt" + payload)))  # fmt: skip
    return _PNG + b"".join(c[1] for c in rest[:-1]) + chunk + rest[-1][1]


def _png_signed(data: bytes) -> bool:
    chunks = _chunks(data)
    if chunks is None:
        return False
    ours = [c for c in chunks if _is_ours(c)]
    if len(ours) != 1:
        return False
    body = _PNG + b"".join(c[1] for c in chunks if not _is_ours(c))
    want = ours[0][1][8 + len(KEY) + 1 : -4]
    return hashlib.sha256(body).hexdigest().encode() == want
