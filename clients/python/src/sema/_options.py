# SPDX-License-Identifier: MIT
"""_options.py - a client's options, with the defaults the C and JS clients take from the
environment (SEMA_SERVER, SEMA_TOKEN, SEMA_CACERT, SEMA_CERT, SEMA_CERT_KEY)."""
from __future__ import annotations

import asyncio
import os
import socket
import ssl
from typing import Dict, Optional
from urllib.parse import urlsplit

from ._flows import Config, text, to_ms
from .errors import NetworkError

DEFAULT_URL = "http://127.0.0.1:7070"
IDLE = 4.0  # seconds an idle keep-alive connection is kept (semad closes them after 60)
FRESH = 1.0  # seconds within which a connection is reused without a look at its socket
MAX_BODY = 8 << 20  # the longest reply body read, as the C client's
MAX_LINE = 256 << 10  # the longest line of an event stream


class Options:
    """Everything a transport and the flows need, resolved once."""

    def __init__(self, url: Optional[str], token: Optional[str], ca: Optional[str],
                 cert: Optional[str], key: Optional[str], ssl_context: Optional[ssl.SSLContext],
                 owner: Optional[str], ttl: Optional[float], retry: float,
                 request_timeout: float, connect_timeout: float, max_idle: int) -> None:
        given = url if url is not None else os.environ.get("SEMA_SERVER")
        # "127.0.0.1:7070" is http://127.0.0.1:7070, as for the sema command and curl
        bare = "http://" + given if given and "://" not in given else given
        self.url = (bare or DEFAULT_URL).rstrip("/")
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname or \
                parts.query or parts.fragment:
            source = "url" if url is not None else "SEMA_SERVER"
            raise ValueError("bad server %s %r: an http:// or https:// URL is needed, e.g. %s"
                             % (source, given, DEFAULT_URL))
        try:
            port = parts.port
        except ValueError as e:
            raise ValueError("bad server URL %r: %s" % (given, e)) from None
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        self.port = port or (443 if self.https else 80)
        self.prefix = parts.path.rstrip("/")
        self.ssl: Optional[ssl.SSLContext] = None
        self.cert = None if ssl_context is not None else \
            cert if cert is not None else os.environ.get("SEMA_CERT") or None
        if self.https:
            self.ssl = ssl_context or tls_context(ca, cert, key)
        elif ssl_context is not None or ca is not None or cert is not None:
            raise ValueError("ca, cert and ssl_context are for an https:// URL, not %s" % self.url)
        if token is None:
            token = os.environ.get("SEMA_TOKEN")
        if token and not all(0x21 <= ord(c) <= 0x7E for c in token):
            raise ValueError("the token holds a space, a control byte or non-ASCII")
        # Host is the transport's to send; no User-Agent (libcurl sends none either)
        self.headers: Dict[str, str] = {}
        if token:  # "" sends none, as in the other clients
            self.headers["Authorization"] = "Bearer " + token
        if not isinstance(retry, (int, float)) or retry < 0:
            raise ValueError("retry must be a number of seconds >= 0")
        if request_timeout <= 0 or connect_timeout <= 0:
            raise ValueError("request_timeout and connect_timeout must be above 0")
        if max_idle < 0:
            raise ValueError("max_idle must be >= 0")
        self.connect_timeout = float(connect_timeout)
        self.max_idle = max_idle
        if owner is None:
            owner = "%s:%d" % (socket.gethostname(), os.getpid())
        text(owner, "owner")  # sent with every acquire: refused now, not each time
        self.config = Config(float(retry), float(request_timeout), owner or None,
                             None if ttl is None else to_ms(ttl, "ttl", 1))

    def where(self) -> str:
        return self.url


def network_error(o: Options, e: BaseException, timed_out: bool,
                  timeout: Optional[float]) -> NetworkError:
    """The NetworkError of an exchange that got no reply: retryable unless it is about
    certificates or a reply that did not come in time (``timed_out``), which sending again
    would not fix."""
    if timed_out:
        return NetworkError("no reply from semad at %s within %gs" % (o.url, timeout or 0),
                            code="timeout", retryable=False)
    if isinstance(e, ssl.SSLCertVerificationError):
        return NetworkError("the TLS certificate of %s is not trusted: %s (give semad's CA "
                            "with ca= or SEMA_CACERT)" % (o.url, e.verify_message or e),
                            code="tls_untrusted", retryable=False)
    if isinstance(e, ssl.SSLError) and "ALERT" in str(e).upper() and o.cert is None:
        return NetworkError("%s asked for a client certificate and none was given (cert= and "
                            "key=, or SEMA_CERT and SEMA_CERT_KEY; TLS: %s)" % (o.url, e),
                            code="tls_certificate_required", retryable=False)
    if isinstance(e, ssl.SSLError) and "ALERT" in str(e).upper():
        return NetworkError("%s refused the client certificate %s (TLS: %s)"
                            % (o.url, o.cert, e), code="tls_certificate_refused",
                            retryable=False)
    if isinstance(e, ssl.SSLError):
        return NetworkError("TLS to semad at %s failed: %s" % (o.url, e), code="tls",
                            retryable=False)
    if isinstance(e, (socket.timeout, asyncio.TimeoutError)):
        return NetworkError("could not connect to semad at %s within %gs"
                            % (o.url, o.connect_timeout), code="timeout")
    if isinstance(e, socket.gaierror):
        return NetworkError("cannot resolve %s: %s" % (o.host, e), code="no_host")
    return NetworkError("semad unreachable at %s: %s" % (o.url, e or type(e).__name__))


def tls_context(ca: Optional[str], cert: Optional[str], key: Optional[str]) -> ssl.SSLContext:
    """The client side of TLS: the CAs in ``ca`` (default $SEMA_CACERT, else the system's)
    and a client certificate ``cert`` with its ``key`` (default $SEMA_CERT, $SEMA_CERT_KEY)
    for a semad started with --tls-client-ca."""
    ca = ca if ca is not None else os.environ.get("SEMA_CACERT") or None
    cert = cert if cert is not None else os.environ.get("SEMA_CERT") or None
    key = key if key is not None else os.environ.get("SEMA_CERT_KEY") or None
    try:
        ctx = ssl.create_default_context(cafile=ca)
    except (OSError, ssl.SSLError) as e:
        raise ValueError("the CA file %s cannot be used: %s" % (ca, e)) from None
    if cert:
        try:
            ctx.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as e:
            raise ValueError("the client certificate %s cannot be used: %s" % (cert, e)) \
                from None
    return ctx
