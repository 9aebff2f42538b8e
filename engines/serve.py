"""An OpenAI-compatible embeddings server for the MiniLM engine (plain ASGI + Uvicorn).

Endpoints (request and response formats of the OpenAI API, usable with the ``openai`` client):

* ``POST /v1/embeddings`` ``{"model", "input", "encoding_format"?, "dimensions"?, "user"?}``:
  ``input`` is a string, a list of strings, a list of token ids or a list of lists of token
  ids. Returns ``{"object": "list", "data": [{"object": "embedding", "index", "embedding"}],
  "model", "usage": {"prompt_tokens", "total_tokens"}}``; ``embedding`` is a list of floats,
  or with ``encoding_format: "base64"`` the little-endian float32 bytes in base64 (what the
  ``openai`` Python client asks for by default).
* ``GET /v1/models``, ``GET /v1/models/{id}``, ``GET /health``.

Limits (each violation is a 400 with an OpenAI-style error object naming the parameter):
at most :attr:`Limits.max_inputs` inputs per request, no empty input, at most the model's
256 tokens per input (including [CLS]/[SEP]; longer inputs are rejected, not truncated),
at most :attr:`Limits.max_request_tokens` tokens per request, bodies up to
:attr:`Limits.max_body_bytes` (413 beyond). Unknown ``model`` -> 404 ``model_not_found``.

Scheduling (:mod:`engines._scheduler`): every request keeps its own queue of inputs; each
engine pass takes inputs from the waiting requests in round-robin order, bounded by
``max_batch`` inputs and ``max_batch_tokens`` tokens, and runs on one engine thread. A
one-sentence request sent while a request of a thousand long inputs is being embedded waits
for the pass in flight and its own pass, not for the long request. JSON parsing,
tokenisation and response encoding run in a thread pool (``parse_threads``), never on the
event loop. Every request has a deadline of ``request_timeout_s``: past it the answer is a
504 ``deadline_exceeded`` saying how many inputs were embedded, and its remaining inputs are
dropped. A client that disconnects before its answer has its remaining inputs dropped too
(``/health`` counts ``expired`` and ``cancelled`` requests).
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import time
import unicodedata
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Limits:
    """Input limits of the server.

    Attributes:
        max_inputs: inputs per request (OpenAI's limit for embeddings: 2048).
        max_request_tokens: tokens summed over a request's inputs.
        max_body_bytes: request body size (413 beyond).
        max_batch: inputs per engine pass (the batcher's batch size).
        max_batch_tokens: tokens per engine pass (bounds one pass's time and so how long a
            request arriving during it waits; >= the model's 256 tokens per input; the
            default, four full-length inputs, keeps a pass well under a second on a
            2-core CPU, so a short request never waits long behind a large one).
        max_wait_ms: how long the batcher waits for more requests once one is queued.
        request_timeout_s: each request's deadline from the moment it is queued (s).
        parse_threads: threads for JSON parsing, tokenisation and response encoding.
    """

    max_inputs: int = 2048
    max_request_tokens: int = 300_000
    max_body_bytes: int = 8 * 2**20
    max_batch: int = 64
    max_batch_tokens: int = 1024
    max_wait_ms: float = 2.0
    request_timeout_s: float = 120.0
    parse_threads: int = 2

    def __post_init__(self) -> None:
        for name in ("max_inputs", "max_request_tokens", "max_body_bytes", "max_batch", "max_batch_tokens",
                     "parse_threads"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"Limits: {name} must be a positive integer, not {v!r}")
        for name in ("max_wait_ms", "request_timeout_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 \
                    or (name == "request_timeout_s" and v == 0):
                raise ValueError(f"Limits: {name} must be a finite number of {'ms' if 'ms' in name else 's'} "
                                 f"{'> 0' if name == 'request_timeout_s' else '>= 0'}, not {v!r}")


def _has_text(t: str) -> bool:
    """Whether ``t`` holds a visible character: not only white space, control characters
    (Unicode category Cc) or invisible format characters (Cf, e.g. U+200B)."""
    return any(not c.isspace() and unicodedata.category(c) not in ("Cc", "Cf") for c in t)


class ApiError(Exception):
    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 type_: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.type = status, message, param, code, type_

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class EmbeddingService:
    """Request validation and the fair scheduler around a :class:`engines.minilm.MiniLM`.

    Args:
        engine: the encoder.
        plan: its plan (``BATCH_SIZE`` is set to ``limits.max_batch``).
        model_id: the model name clients send (``all-MiniLM-L6-v2``; the full
            ``sentence-transformers/all-MiniLM-L6-v2`` is accepted too).

    Raises:
        ValueError: ``limits.max_batch_tokens`` below the model's tokens per input.
    """

    def __init__(self, engine, plan=None, *, limits: Limits | None = None, model_id: str = "all-MiniLM-L6-v2") -> None:
        from tokenizers import Tokenizer  # noqa: PLC0415

        from engines._scheduler import FairScheduler  # noqa: PLC0415

        self.engine, self.limits, self.model_id = engine, limits or Limits(), model_id
        if self.limits.max_batch_tokens < engine.max_seq_length:
            raise ValueError(f"max_batch_tokens={self.limits.max_batch_tokens} is below the model's "
                             f"{engine.max_seq_length} tokens per input")
        self.plan = engine.plan({**engine.plan(plan).to_dict(), "BATCH_SIZE": _nearest_batch(engine, self.limits.max_batch)})
        self.aliases = {model_id, "sentence-transformers/all-MiniLM-L6-v2", "minilm"}
        self.created = int(time.time())
        # The server's own tokenizer, never truncating (inputs over the limit are rejected, not
        # cut) and never reconfigured, so parse threads can share it.
        self.tokenizer = Tokenizer.from_str(engine.tokenizer.to_str())
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine")
        self.parse_pool = ThreadPoolExecutor(max_workers=max(1, self.limits.parse_threads), thread_name_prefix="parse")
        self.scheduler = FairScheduler(lambda toks: engine.embed_tokens(toks, self.plan), engine.dim, self._pool,
                                       max_batch_inputs=self.limits.max_batch, max_batch_tokens=self.limits.max_batch_tokens,
                                       max_wait_ms=self.limits.max_wait_ms)
        self.stats = {"requests": 0, "inputs": 0, "errors": 0}

    def health(self) -> dict[str, Any]:
        return {**self.stats, **self.scheduler.stats, "queued_inputs": self.scheduler.queued_inputs()}

    # -- validation -------------------------------------------------------------------------
    def parse(self, body: Any) -> tuple[list[list[int]], str]:
        """Validate a request body; returns (token lists, encoding format).

        Raises:
            ApiError: what is wrong, with the parameter's name.
        """
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be a JSON object")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise ApiError(400, "you must provide a model parameter", param="model")
        if model not in self.aliases:
            raise ApiError(404, f"The model '{model}' does not exist; this server serves '{self.model_id}'",
                           param="model", code="model_not_found")
        fmt = body.get("encoding_format", "float")
        if fmt not in ("float", "base64"):
            raise ApiError(400, f"encoding_format must be 'float' or 'base64', not {fmt!r}", param="encoding_format")
        dims = body.get("dimensions")
        if dims is not None and dims != self.engine.dim:
            raise ApiError(400, f"dimensions={dims!r}: this model produces {self.engine.dim}-dimensional embeddings "
                                "and cannot shorten them", param="dimensions")
        if "input" not in body:
            raise ApiError(400, "you must provide an input parameter", param="input")
        tokens = self._tokens(body["input"])
        total = sum(len(t) for t in tokens)
        if total > self.limits.max_request_tokens:
            raise ApiError(400, f"the request has {total} tokens; at most {self.limits.max_request_tokens} per request",
                           param="input")
        return tokens, fmt

    def _tokens(self, inp: Any) -> list[list[int]]:
        from engines.minilm import TokenLimitError  # noqa: PLC0415

        def is_ids(x):
            return isinstance(x, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in x)

        if isinstance(inp, str):
            items: list = [inp]
        elif isinstance(inp, list) and inp and is_ids(inp):
            items = [inp]
        elif isinstance(inp, list):
            items = inp
        else:
            raise ApiError(400, "input must be a string, an array of strings, an array of token ids or an array of "
                                "arrays of token ids", param="input")
        if not items:
            raise ApiError(400, "input must not be an empty array", param="input")
        if len(items) > self.limits.max_inputs:
            raise ApiError(400, f"input has {len(items)} items; at most {self.limits.max_inputs} per request",
                           param="input")
        texts = [x for x in items if isinstance(x, str)]
        if texts and len(texts) != len(items):
            raise ApiError(400, "input mixes strings and token arrays; send one kind per request", param="input")
        if texts:
            for i, t in enumerate(items):
                if not _has_text(t):
                    raise ApiError(400, f"input[{i}] is empty; every input must contain text", param="input")
                try:
                    t.encode("utf-8")
                except UnicodeEncodeError as exc:
                    raise ApiError(400, f"input[{i}] is not valid Unicode text: {exc.reason} at character "
                                        f"{exc.start}", param="input") from None
            tokens = [e.ids for e in self.tokenizer.encode_batch(items)]
        else:
            for i, t in enumerate(items):
                if not is_ids(t):
                    raise ApiError(400, f"input[{i}] must be an array of integer token ids", param="input")
            tokens = [list(t) for t in items]
        try:
            self.engine.check_tokens(tokens)
        except TokenLimitError as exc:
            raise ApiError(400, str(exc), param="input", code="context_length_exceeded"
                           if "at most" in str(exc) else None) from None
        return tokens

    def parse_raw(self, raw: bytes) -> tuple[list[list[int]], str]:
        """:meth:`parse` of a raw request body (JSON); runs in :attr:`parse_pool`.

        Raises:
            ApiError: not JSON, or what :meth:`parse` raises.
        """
        try:
            body = json.loads(raw or b"null")
        except (ValueError, UnicodeDecodeError) as exc:
            raise ApiError(400, f"the request body is not valid JSON: {exc}") from None
        except RecursionError:
            raise ApiError(400, "the request body is nested too deeply to be a request") from None
        return self.parse(body)

    # -- scheduling -------------------------------------------------------------------------
    async def start(self) -> None:
        await self.scheduler.start()

    async def stop(self) -> None:
        await self.scheduler.stop()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.parse_pool.shutdown(wait=False, cancel_futures=True)

    async def embed(self, tokens: list[list[int]]) -> np.ndarray:
        """Embeddings of ``tokens`` (float32 [n, 384]) through the scheduler.

        Raises:
            ApiError: 504 ``deadline_exceeded`` past ``request_timeout_s``.
        """
        req = self.scheduler.submit(tokens, self.limits.request_timeout_s)
        try:
            return await _result(req)
        except asyncio.CancelledError:
            self.scheduler.cancel(req)
            raise

    def response_bytes(self, emb: np.ndarray, tokens: list[list[int]], fmt: str) -> bytes:
        """The JSON response body of :meth:`response`; runs in :attr:`parse_pool`."""
        return json.dumps(self.response(emb, tokens, fmt)).encode()

    def response(self, emb: np.ndarray, tokens: list[list[int]], fmt: str) -> dict[str, Any]:
        data = []
        for i, row in enumerate(emb):
            value: Any = base64.b64encode(row.astype("<f4").tobytes()).decode() if fmt == "base64" else row.tolist()
            data.append({"object": "embedding", "index": i, "embedding": value})
        n = sum(len(t) for t in tokens)
        return {"object": "list", "data": data, "model": self.model_id, "usage": {"prompt_tokens": n, "total_tokens": n}}


async def _result(req) -> np.ndarray:
    from engines._scheduler import DeadlineExceeded  # noqa: PLC0415

    try:
        return await req.future
    except DeadlineExceeded as exc:
        raise ApiError(504, str(exc), code="deadline_exceeded", type_="timeout") from None


def _nearest_batch(engine, n: int) -> int:
    sizes = engine.plan_spec.batch_sizes
    return min(sizes, key=lambda s: (abs(s - n), -s))


class EmbeddingsApp:
    """The ASGI application (HTTP + lifespan) around an :class:`EmbeddingService`."""

    def __init__(self, service: EmbeddingService) -> None:
        self.service = service

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await self.service.start()
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await self.service.stop()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        try:
            status, body = await self._route(scope, receive)
        except _ClientGone:
            return  # nobody to answer; its remaining inputs were dropped
        except ApiError as exc:
            self.service.stats["errors"] += 1
            status, body = exc.status, exc.body()
        except Exception as exc:  # noqa: BLE001 - a 500 with a message, never a dropped connection
            self.service.stats["errors"] += 1
            status, body = 500, ApiError(500, f"internal error: {type(exc).__name__}: {exc}", type_="server_error").body()
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]})
        await send({"type": "http.response.body", "body": payload})

    async def _route(self, scope, receive) -> tuple[int, Any]:
        path, method, svc = scope["path"].rstrip("/"), scope["method"], self.service
        model = {"id": svc.model_id, "object": "model", "created": svc.created, "owned_by": "int21-engines"}
        if path == "/health":
            return 200, {"status": "ok", **svc.health()}
        if path == "/v1/models":
            return 200, {"object": "list", "data": [model]}
        if path.startswith("/v1/models/"):
            name = path[len("/v1/models/"):]
            if name in svc.aliases or name == "sentence-transformers/all-MiniLM-L6-v2":
                return 200, model
            raise ApiError(404, f"The model '{name}' does not exist", param="model", code="model_not_found")
        if path != "/v1/embeddings":
            raise ApiError(404, f"no route {method} {scope['path']} (this server has /v1/embeddings and /v1/models)",
                           code="not_found")
        if method != "POST":
            raise ApiError(405, f"{method} is not allowed on /v1/embeddings; use POST", code="method_not_allowed")
        raw = await self._body(receive)
        loop = asyncio.get_running_loop()
        gone = asyncio.ensure_future(_disconnect(receive))
        try:
            tokens, fmt = await _unless_gone(loop.run_in_executor(svc.parse_pool, svc.parse_raw, raw), gone)
            emb = await _unless_gone(asyncio.ensure_future(svc.embed(tokens)), gone)
        finally:
            gone.cancel()
        svc.stats["requests"] += 1
        svc.stats["inputs"] += len(tokens)
        return 200, await loop.run_in_executor(svc.parse_pool, svc.response_bytes, emb, tokens, fmt)

    async def _body(self, receive) -> bytes:
        chunks, size = [], 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                raise ApiError(400, "client disconnected")
            chunk = msg.get("body", b"")
            size += len(chunk)
            if size > self.service.limits.max_body_bytes:
                raise ApiError(413, f"request body over {self.service.limits.max_body_bytes} bytes")
            chunks.append(chunk)
            if not msg.get("more_body"):
                return b"".join(chunks)


class _ClientGone(Exception):
    """The client disconnected before its answer."""


async def _disconnect(receive) -> None:
    """Returns when the client disconnects (ASGI ``http.disconnect`` after the body)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def _unless_gone(work: asyncio.Future, gone: asyncio.Future):
    """``await work``, unless the client disconnects first: then ``work`` is cancelled (a
    request in the scheduler is dropped) and :class:`_ClientGone` raised."""
    await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
    if work.done():
        return work.result()
    work.cancel()
    raise _ClientGone


def make_app(engine=None, plan=None, limits: Limits | None = None) -> EmbeddingsApp:
    """The ASGI app serving ``engine`` (default: a fresh :class:`engines.minilm.MiniLM`)."""
    if engine is None:
        from engines.minilm import MiniLM  # noqa: PLC0415

        engine = MiniLM()
    return EmbeddingsApp(EmbeddingService(engine, plan, limits=limits))


def serve(app: EmbeddingsApp, host: str = "127.0.0.1", port: int = 8100, log_level: str = "warning") -> None:
    """Serve ``app`` with Uvicorn until interrupted."""
    import uvicorn  # noqa: PLC0415

    uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="on")).run()
