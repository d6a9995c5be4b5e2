"""One session with a Redfish service through DMTF's `redfish` library, every request bounded.

The library retries a failed request up to 10 times a second apart and waits as long as the
server likes; here every request is tried once (`max_retry=0`: the power rank's own reopening
retries) with `(timeout/2, timeout/2)` seconds to connect (TLS handshake included) and to get the
answer. Its exceptions become a ServiceError of one line saying what failed, of a `kind` the
meter turns into a remedy: auth (HTTP 401), tls (certificate), connect, timeout, http, session,
missing.
"""

from __future__ import annotations

import math
import re
import socket
import time
import warnings
from urllib.parse import urlsplit

from npmpi.meters.redfish_discovery import decode

ROOT_URI = "/redfish/v1/"
INSTALL_HINT = (
    "DMTF's redfish library is not installed: pip install 'redfish>=3.2' (the npmpi[redfish] extra)"
)
_SSL_REASON = re.compile(r"\[SSL(?:: [A-Z_]+)?\][^'\"()]*")
# what a TLS client says when the server's first bytes are no TLS record (not a certificate problem)
_NOT_TLS = re.compile(
    r"WRONG_VERSION_NUMBER|wrong version number|record layer failure|HTTP_REQUEST|unknown protocol"
)
_ERRNO_REASON = re.compile(r"\[Errno -?\d+\][^'\"()]*")


class ServiceError(Exception):
    """A request that got no usable answer; `kind` says which remedy applies."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class RedfishService:
    """A logged-in client: get_json(uri) while the session lasts, logout() at the end."""

    root_uri = ROOT_URI

    def __init__(
        self, base_url: str, cafile: str | None, timeout_s: float, login_timeout_s: float | None = None
    ) -> None:
        self.base_url = base_url
        self.cafile = cafile
        self.timeout_s = timeout_s
        # the login (service root, session: two TLS handshakes) may take longer than a read
        self.login_timeout_s = login_timeout_s or timeout_s
        self.reachable = False  # the last request got an HTTP answer (so a logout may be tried)
        self.last_request_unix_s = (math.nan, math.nan)  # wall clock before and after the last GET
        self._client = None

    def _timeouts(self) -> tuple[float, float]:
        return (self.timeout_s / 2, self.timeout_s / 2)

    def login(self, username: str, password: str) -> None:
        """Read the service root and create a session; ServiceError if either fails."""
        try:
            import redfish
        except ImportError:
            raise ServiceError("missing", INSTALL_HINT) from None
        try:
            # the library warns of services that deviate from the standard; a failure says more
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                half = self.login_timeout_s / 2
                client = redfish.redfish_client(
                    base_url=self.base_url, cafile=self.cafile, timeout=(half, half), max_retry=0
                )
                self._client = client
                client.login(username=username, password=password, auth=redfish.AuthMethod.SESSION)
        except Exception as exc:
            error = self._error(exc, "login", self.login_timeout_s)
            if password and password in str(error):  # a service that echoes what it was sent
                error = ServiceError(error.kind, str(error).replace(password, "***"))
            raise error from None
        self.reachable = True
        if not client.get_session_key():
            raise ServiceError(
                "session", "login: the service made no session (no X-Auth-Token in its answer)"
            )

    def get_json(self, uri: str) -> dict:
        """The resource at `uri` as a JSON object; ServiceError or PayloadError otherwise."""
        if self._client is None:
            raise ServiceError("connect", "not logged in")
        try:
            start = time.time()
            resp = self._client.get(uri, timeout=self._timeouts(), max_retry=0)
            self.last_request_unix_s = (start, time.time())  # the exchange alone, before decoding
        except Exception as exc:
            raise self._error(exc, uri) from None
        self.reachable = True
        if resp.status == 401:
            raise ServiceError(
                "auth",
                f"{uri}: HTTP 401 Unauthorized (the session expired or was closed; the meter logs in again)",
            )
        if resp.status != 200:
            raise ServiceError("http", f"{uri}: HTTP {resp.status}")
        return decode(resp.text, uri)

    def logout(self) -> bool:
        """Delete the session (bounded): True once done or refused for good, False if the service did
        not answer (then it may be tried again later: a BMC allows only a few sessions at a time)."""
        client = self._client
        if client is None:
            return True
        try:
            client.logout()
        except Exception as exc:
            if type(exc).__name__ != "BadRequestError":  # no answer: keep the session to delete it later
                self.reachable = False
                return False
        self._client = None
        return True

    def _error(self, exc: Exception, where: str, timeout_s: float | None = None) -> ServiceError:
        """A ServiceError for one of the library's exceptions (its cause tells the transport's)."""
        name = type(exc).__name__
        if name == "InvalidCredentialsError":
            self.reachable = True
            return ServiceError("auth", f"{where}: HTTP 401 Unauthorized")
        if name in ("ServerDownOrUnreachableError", "SessionCreationError"):
            self.reachable = True
            return ServiceError("http", f"{where}: {str(exc).splitlines()[0][:200]}")
        if name == "JsonDecodingError":
            self.reachable = True
            return ServiceError("http", f"{where}: the service root is not JSON")
        cause = exc.__cause__ or exc.__context__ or exc
        text = f"{type(cause).__name__}: {cause}"
        self.reachable = False
        if "SSL" in text and _NOT_TLS.search(text) and self.answers_plain_http():
            reason = _plain(_SSL_REASON.search(text), text)
            return ServiceError(
                "plain-http", f"{where}: the service answered in plain HTTP, not HTTPS ({reason})"
            )
        if "SSL" in text:
            found = _SSL_REASON.search(text)
            return ServiceError(
                "tls", f"{where}: TLS failed ({found.group(0).strip() if found else 'handshake'})"
            )
        if "Timeout" in type(cause).__name__ or "timed out" in text:
            return ServiceError("timeout", f"{where}: no answer within {timeout_s or self.timeout_s:g} s")
        if "ConnectionError" in text or "Errno" in text:
            found = _ERRNO_REASON.search(text)
            return ServiceError(
                "connect", f"{where}: cannot connect to {self.base_url} ({_plain(found, text)})"
            )
        return ServiceError("http", f"{where}: {name}: {str(exc)[:200]}")

    def answers_plain_http(self) -> bool:
        """Whether the service's port answers a plain HTTP request (after a failed TLS handshake: an
        HTTP server on the port, or `http://` where https was meant)."""
        host, _, port = urlsplit(self.base_url).netloc.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=self.timeout_s / 2) as sock:
                sock.settimeout(self.timeout_s / 2)
                sock.sendall(
                    b"HEAD /redfish/v1/ HTTP/1.0\r\nHost: " + host.encode("ascii", "replace") + b"\r\n\r\n"
                )
                return sock.recv(5) == b"HTTP/"
        except (OSError, ValueError, UnicodeError):
            return False


def _plain(found, text: str) -> str:
    return found.group(0).strip() if found else text[:160]
