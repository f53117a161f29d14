"""HTTP/1.1 request framing for the serving worker's poller, and the body cap of each path (pure).

Owns: finding where a request's head ends in the bytes read so far, the little of the head the poller
needs (path, Content-Length, ``Expect: 100-continue``; method, version and ``Connection`` for the direct
routes), the body cap of each path, and the whole replies written without gunicorn: those the poller
sends when it refuses a request before any thread sees it, and a direct route's. Must not: parse more
of the head than that (gunicorn parses it again, with its own limits, for every request no direct
route answers), or do I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import orjson

from extender.errors import RefusedError

HEAD_MAX_BYTES = 16 * 1024       # request line + headers; kube-scheduler sends ~200 bytes
BIND_BODY_MAX_BYTES = 16 * 1024  # an ExtenderBindingArgs is < 1 KiB (four names of <= 253 characters)
OTHER_BODY_MAX_BYTES = 16 * 1024  # /healthz, /readyz, /metrics, /explain take no body
FIT_BODY_MAX_BYTES = 1024 * 1024  # /fit: a Job or JobSet is a few KiB; 1,000 Pods written out ~1 MiB
NAME_LIST_PATHS = ("/filter", "/prioritize", "/preempt")
# A head a direct route may answer is one gunicorn would accept: within its default limits, each header
# name a token and each value free of control characters but tab (no obs-fold, stray CR or LF, NUL).
# Anything else goes to gunicorn, which refuses it, so the two never read one request two ways.
DIRECT_LINE_MAX_BYTES = 4094      # gunicorn's limit_request_line
DIRECT_HEADERS_MAX = 100          # its limit_request_fields
DIRECT_HEADER_MAX_BYTES = 8190    # its limit_request_field_size
_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_FIELD_VALUE = re.compile(rb"[\t\x20-\x7e\x80-\xff]*")
_DIGITS_MAX = 15                 # a Content-Length longer than this is over every cap


@dataclass(frozen=True, slots=True)
class BodyCaps:
    """Body caps by path: ``names`` for filter/prioritize in the NodeNames form (and preempt's victims
    by UID), ``full_nodes`` for the full Nodes form (and preempt's victims as full Pods; 0: that form is
    refused), fixed ones for bind and everything else."""

    names: int
    full_nodes: int = 0

    def for_path(self, path: str) -> int:
        if path in NAME_LIST_PATHS:
            return max(self.names, self.full_nodes)
        if path == "/fit":
            return FIT_BODY_MAX_BYTES
        return BIND_BODY_MAX_BYTES if path == "/bind" else OTHER_BODY_MAX_BYTES


@dataclass(frozen=True, slots=True)
class Head:
    size: int            # bytes of the head, blank line included
    path: str
    body_bytes: int      # Content-Length (0 without one)
    expects_continue: bool
    method: str = ""
    plain: bool = False  # well-formed HTTP/1.1, no query, no Upgrade, Connection close or keep-alive: direct
    closes: bool = False  # ``Connection: close``

    @property
    def total(self) -> int:
        return self.size + self.body_bytes


_REASONS = {200: "OK", 400: "Bad Request", 408: "Request Timeout", 411: "Length Required", 413: "Content Too Large",
            431: "Request Header Fields Too Large", 503: "Service Unavailable"}


def answer(status: int, body: bytes, keep: bool) -> bytes:
    """A whole HTTP/1.1 reply with a JSON ``body`` (a direct route's); ``Connection: close`` unless ``keep``."""
    return b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n" % (
        status, _REASONS.get(status, "Error").encode("ascii"), len(body),
        b"" if keep else b"Connection: close\r\n") + body


def reply(status: int, message: str) -> bytes:
    """A whole HTTP/1.1 reply with the app's JSON error shape; the connection closes after it."""
    return answer(status, orjson.dumps({"error": message, "status": status}), keep=False)


def find_head(buf: bytes | bytearray, caps: BodyCaps) -> Head | None:
    """The head of the request at the start of ``buf``; None while it is incomplete. Raises RefusedError
    for a head over HEAD_MAX_BYTES, a chunked body, an unreadable Content-Length or a body over its cap."""
    end = buf.find(b"\r\n\r\n", 0, HEAD_MAX_BYTES + 4)
    if end < 0:
        if len(buf) > HEAD_MAX_BYTES:
            raise RefusedError(431, f"request head larger than {HEAD_MAX_BYTES} bytes")
        return None
    lines = bytes(buf[:end]).split(b"\r\n")
    target = lines[0].split(b" ")
    if len(target) != 3:
        raise RefusedError(400, "malformed request line")
    path, has_query, _ = target[1].partition(b"?")
    plain = (target[2] == b"HTTP/1.1" and not has_query and len(lines[0]) <= DIRECT_LINE_MAX_BYTES
             and len(lines) <= DIRECT_HEADERS_MAX + 1)
    length: int | None = None
    expects_continue = closes = False
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        plain = plain and len(line) <= DIRECT_HEADER_MAX_BYTES and bool(_TOKEN.fullmatch(name)) \
            and bool(_FIELD_VALUE.fullmatch(value))  # no fold, stray CR or LF, NUL or space before the colon
        name, value = name.strip().lower(), value.strip()
        if not colon:
            raise RefusedError(400, "malformed header line")
        if name == b"content-length":
            if length is not None or not value.isdigit():
                raise RefusedError(400, "Content-Length must be given once, as a decimal number")
            length = int(value) if len(value) <= _DIGITS_MAX else 10**_DIGITS_MAX
        elif name == b"transfer-encoding":
            raise RefusedError(411, "send the body with a Content-Length (Transfer-Encoding is not accepted)")
        elif name == b"expect":
            expects_continue = expects_continue or value.lower() == b"100-continue"
            plain = plain and value.lower() == b"100-continue"
        elif name == b"connection":  # a close anywhere closes (RFC 9112 9.6)
            closes = closes or value.lower() == b"close"
            plain = plain and value.lower() in (b"close", b"keep-alive")
        elif name == b"upgrade":
            plain = False
    text = path.decode("latin-1")
    cap = caps.for_path(text)
    if (length or 0) > cap:
        raise RefusedError(413, f"request body larger than {cap} bytes")
    return Head(end + 4, text, length or 0, expects_continue, target[0].decode("latin-1"), plain, closes)


def without_expect(request: bytes, head: Head) -> bytes:
    """The request with its ``Expect`` header left out: the poller has answered it already, and the
    body is all there, so gunicorn must not send a second ``100 Continue``."""
    lines = request[:head.size - 4].split(b"\r\n")
    kept = [line for line in lines if not line.lower().startswith(b"expect:")]
    return b"\r\n".join(kept) + b"\r\n\r\n" + request[head.size:]


CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
