"""HTTP core of the OML client: bearer auth, Idempotency-Key, retries, problem mapping.

:class:`OMLClient` (sync) and :class:`AsyncOMLClient` share one set of typed
methods (``client/operations.py``); this module holds what happens to each
call on the wire.

* **Authentication**: ``Authorization: Bearer oml_<key id>_<secret>``. The
  key never appears in ``repr()`` or in log lines.
* **Idempotency**: every call to an operation the server de-duplicates
  (the OpenAPI operation declares an ``Idempotency-Key`` header) carries an
  ``Idempotency-Key``: the caller's, or a fresh ``uuid4`` generated once per
  method call and **reused by every retry of that call**. The server then
  answers a repeated request with the first response and appends nothing
  (docs/design.md §The journal: Idempotency).
* **Retries**: on a connection failure, a timeout or a 502/503/504, the call
  is retried up to ``retries`` more times with exponential backoff and full
  jitter (``uniform(0, min(max_backoff, backoff · 2^attempt))`` seconds, or
  the server's ``Retry-After`` when it sends one, capped at ``max_backoff``).
  That is safe for reads (GETs, and POSTs that only read, such as recall)
  and for idempotent writes. A write the server does not de-duplicate
  (evidence export, checkpoint issue) is retried only when the request
  certainly never left (connection refused, connect or pool timeout). A 4xx
  is never retried.
* **Errors**: a non-2xx answer raises the :class:`~oml.client.errors.OMLProblem`
  subclass for its ``code``; retries exhausted without an answer raise
  :class:`~oml.client.errors.OMLConnectionError`.
"""
from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx

from .errors import OMLConnectionError, OMLProblem
from .operations import Operations

__all__ = ["OMLClient", "AsyncOMLClient", "Call", "RETRY_STATUSES", "DEFAULT_TIMEOUT"]

log = logging.getLogger("oml.client")

RETRY_STATUSES = frozenset({502, 503, 504})
DEFAULT_TIMEOUT = 30.0
USER_AGENT = "oml-client/0.1"

# Errors raised before any byte of the request could have reached the server.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
# Errors after which the server may or may not have acted on the request.
_MAYBE_SENT = (httpx.ReadError, httpx.WriteError, httpx.ReadTimeout, httpx.WriteTimeout,
               httpx.RemoteProtocolError, httpx.CloseError)


@dataclass
class Call:
    """One operation invocation, independent of sync/async.

    ``path`` is the OpenAPI template (``/v1/claims/{claim_id}``); ``path_params``
    fill it (percent-encoded). ``idempotent`` means the server de-duplicates
    by ``Idempotency-Key``; ``parse`` turns the successful response into the
    method's return value.
    """

    method: str
    path: str
    path_params: Mapping[str, Any] = field(default_factory=dict)
    params: Mapping[str, Any] | None = None
    json: Any = None
    content: bytes | None = None
    headers: Mapping[str, str] | None = None
    idempotent: bool = False
    idempotency_key: str | None = None
    parse: Callable[[httpx.Response], Any] | None = None
    read: bool = False   # a POST that only reads (recall): as safe to repeat as a GET

    def url(self) -> str:
        return self.path.format(**{k: quote(str(v), safe="") for k, v in self.path_params.items()})

    @property
    def write(self) -> bool:
        return not self.read and self.method not in ("GET", "HEAD", "OPTIONS")


def _clean_params(params: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not params:
        return None
    out: dict[str, Any] = {}
    for k, v in params.items():
        if v is None:
            continue
        if isinstance(v, bool):
            v = "true" if v else "false"
        out[k] = v
    return out or None


def _retry_after(resp: httpx.Response, cap: float) -> float | None:
    value = resp.headers.get("retry-after", "")
    if value.strip().isdigit():
        return min(cap, float(value))
    return None


def _raise_for_problem(resp: httpx.Response) -> None:
    if resp.is_success:
        return
    try:
        body = resp.json()
    except ValueError:
        body = None
    raise OMLProblem.from_body(resp.status_code, body, request_id=resp.headers.get("x-request-id"))


def _default_parse(resp: httpx.Response) -> Any:
    if resp.status_code == 204 or not resp.content:
        return None
    ctype = resp.headers.get("content-type", "")
    if "json" in ctype:
        return resp.json()
    if ctype.startswith("text/"):
        return resp.text
    return resp.content


class _Base(Operations):
    """Shared configuration and the retry decision; subclasses provide the I/O."""

    _http: httpx.Client | httpx.AsyncClient  # set by the subclass: the one it sends with

    def __init__(self, base_url: str, api_key: str | None, *, timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
                 retries: int = 3, backoff: float = 0.25, max_backoff: float = 8.0,
                 headers: Mapping[str, str] | None = None, rng: random.Random | None = None) -> None:
        if retries < 0:
            raise ValueError("retries must be >= 0")
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._rng = rng or random.Random()
        self._headers = {"Accept": "application/json, application/problem+json", "User-Agent": USER_AGENT}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._headers.update(headers or {})

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.base_url!r})"

    def _request(self, call: Call, key: str | None) -> httpx.Request:
        headers = dict(call.headers or {})
        if key is not None:
            headers["Idempotency-Key"] = key
        return self._http.build_request(call.method, call.url(), params=_clean_params(call.params),
                                        json=call.json if call.content is None else None,
                                        content=call.content, headers=headers)

    @staticmethod
    def _key_for(call: Call) -> str | None:
        if call.idempotency_key is not None:
            return call.idempotency_key
        return str(uuid.uuid4()) if call.idempotent else None

    def _retryable_error(self, call: Call, exc: Exception) -> bool:
        if isinstance(exc, _NOT_SENT):
            return True
        if isinstance(exc, _MAYBE_SENT):
            return not call.write or call.idempotent
        return False

    def _retryable_status(self, call: Call, status: int) -> bool:
        return status in RETRY_STATUSES and (not call.write or call.idempotent)

    def _delay(self, attempt: int, resp: httpx.Response | None) -> float:
        if resp is not None:
            ra = _retry_after(resp, self.max_backoff)
            if ra is not None:
                return ra
        return self._rng.uniform(0, min(self.max_backoff, self.backoff * (2 ** attempt)))

    def _finish(self, call: Call, resp: httpx.Response) -> Any:
        _raise_for_problem(resp)
        return (call.parse or _default_parse)(resp)


class OMLClient(_Base):
    """Synchronous client.

    Args:
        base_url: the server, e.g. ``http://127.0.0.1:8765``.
        api_key: ``oml_<key id>_<secret>``; None only for unauthenticated endpoints (health).
        timeout: seconds (or an ``httpx.Timeout``) per attempt.
        retries: extra attempts after the first on connection errors and 502/503/504.
        backoff, max_backoff: seconds; the jittered exponential backoff's base and cap.
        transport: an ``httpx.BaseTransport`` (tests, proxies, in-process apps).
        headers: extra headers on every request.

    Use as a context manager, or call :meth:`close`.
    """

    _http: httpx.Client

    def __init__(self, base_url: str, api_key: str | None = None, *, timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
                 retries: int = 3, backoff: float = 0.25, max_backoff: float = 8.0,
                 transport: httpx.BaseTransport | None = None, headers: Mapping[str, str] | None = None,
                 sleep: Callable[[float], None] = time.sleep, rng: random.Random | None = None) -> None:
        super().__init__(base_url, api_key, timeout=timeout, retries=retries, backoff=backoff,
                         max_backoff=max_backoff, headers=headers, rng=rng)
        self._sleep = sleep
        self._http = httpx.Client(base_url=self.base_url, headers=self._headers, timeout=timeout, transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> OMLClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, call: Call) -> Any:
        key = self._key_for(call)
        attempt = 0
        while True:
            request = self._request(call, key)
            try:
                resp = self._http.send(request)
            except httpx.TransportError as exc:
                if attempt >= self.retries or not self._retryable_error(call, exc):
                    raise OMLConnectionError(f"{call.method} {call.path}: {type(exc).__name__} after {attempt + 1} attempt(s)",
                                             attempts=attempt + 1) from exc
                delay = self._delay(attempt, None)
                log.info("retry %s %s after %s (attempt %d, %.2fs)", call.method, call.path, type(exc).__name__, attempt + 1, delay)
            else:
                if attempt < self.retries and self._retryable_status(call, resp.status_code):
                    delay = self._delay(attempt, resp)
                    log.info("retry %s %s after %d (attempt %d, %.2fs)", call.method, call.path, resp.status_code, attempt + 1, delay)
                    resp.close()
                else:
                    resp.read()
                    return self._finish(call, resp)
            attempt += 1
            self._sleep(delay)


class AsyncOMLClient(_Base):
    """Asynchronous client: the same methods as :class:`OMLClient`, each returning an awaitable.

    Takes an ``httpx.AsyncBaseTransport`` (e.g. ``httpx.ASGITransport(app)``).
    Use ``async with``, or ``await aclose()``.
    """

    _http: httpx.AsyncClient

    def __init__(self, base_url: str, api_key: str | None = None, *, timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
                 retries: int = 3, backoff: float = 0.25, max_backoff: float = 8.0,
                 transport: httpx.AsyncBaseTransport | None = None, headers: Mapping[str, str] | None = None,
                 sleep: Callable[[float], Any] = asyncio.sleep, rng: random.Random | None = None) -> None:
        super().__init__(base_url, api_key, timeout=timeout, retries=retries, backoff=backoff,
                         max_backoff=max_backoff, headers=headers, rng=rng)
        self._sleep = sleep
        self._http = httpx.AsyncClient(base_url=self.base_url, headers=self._headers, timeout=timeout, transport=transport)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncOMLClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _send(self, call: Call) -> Any:
        key = self._key_for(call)
        attempt = 0
        while True:
            request = self._request(call, key)
            try:
                resp = await self._http.send(request)
            except httpx.TransportError as exc:
                if attempt >= self.retries or not self._retryable_error(call, exc):
                    raise OMLConnectionError(f"{call.method} {call.path}: {type(exc).__name__} after {attempt + 1} attempt(s)",
                                             attempts=attempt + 1) from exc
                delay = self._delay(attempt, None)
            else:
                if attempt < self.retries and self._retryable_status(call, resp.status_code):
                    delay = self._delay(attempt, resp)
                    await resp.aclose()
                else:
                    await resp.aread()
                    return self._finish(call, resp)
            attempt += 1
            await self._sleep(delay)
