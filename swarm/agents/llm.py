"""LLM coding agent: asks a model behind any OpenAI-compatible endpoint for complete kernels.

The prompt (:mod:`swarm.agents.llm_prompt`) carries the workload's contract, the template and
the evidence: the best kernels (own and others', with source, parameters and metrics), the
incumbent's roofline position and static resources, failure rules, insights and the engineer's
directions, trimmed to the goal's token budget. The answer (:mod:`swarm.agents.llm_answer`) is
one JSON object ``{"source" | "diff", "params", "rationale"}``, or one fenced C/CUDA block (or
a ``diff`` block against the parent kernel) with a fenced JSON object. A malformed answer goes
back to the same conversation with the reason; an endpoint error is retried with exponential
backoff; what still fails becomes a failed :class:`Proposal` with the raw answer (kept as
evidence), never an exception.

Every call sends ``max_tokens`` and streams the answer. A watchdog thread closes the response
when the call's total deadline (``timeout_s``) passes or the lane cancels it, whatever the
server sends (chunks, SSE comment lines or nothing); closing it closes the connection, which
makes vLLM, SGLang and llama.cpp stop generating. An answer over ``ANSWER_CHARS_PER_TOKEN x
max_tokens`` characters is cut there and refused. Answer text is stored and sent back in its
:func:`~swarm.agents.llm_answer.storable` form.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from swarm.agents.base import Agent, Proposal, RunView, between
from swarm.agents.llm_answer import ANSWER_SCHEMA, MalformedAnswer, parse_answer, storable
from swarm.agents.llm_prompt import SYSTEM_PROMPT, build_prompt

log = logging.getLogger(__name__)

RESPONSE_FORMATS = ("json_schema", "json_object", "none")
#: Characters per completion token beyond which an answer is refused (a token is about 4
#: characters of code; twice that leaves room for long tokens).
ANSWER_CHARS_PER_TOKEN = 8
#: Reported token counts above this are taken as broken and estimated instead.
MAX_REPORTED_TOKENS = 10**8
#: Characters of one message kept in a transcript and re-sent in a repair conversation.
MAX_MESSAGE_CHARS = 200_000


class Cancelled(Exception):
    """The lane cancelled the request (the run ended or the lane's budget is spent)."""


class DeadlineExceeded(TimeoutError):
    """A call ran past its per-call deadline (``timeout_s``)."""


class AnswerTooLong(ValueError):
    """An answer ran past ``ANSWER_CHARS_PER_TOKEN x max_tokens`` characters."""


@dataclass
class Reply:
    """One chat-completions answer: text, tokens (estimated at 4 characters a token when the
    endpoint reports no usage), latency in s and why generation stopped."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    finish_reason: str = ""
    estimated: bool = False


@dataclass(frozen=True)
class RepairCase:
    """A failed candidate to repair in its own conversation.

    Attributes:
        candidate: id of the failed candidate (the repair's parent).
        source: its complete source as compiled (``#define`` lines included).
        params: its parameters.
        status: ``compile_error``, ``wrong_result`` or ``runtime_error``.
        feedback: what went wrong, for the model (log tail, the failing case).
        transcript: the candidate's transcript (its ``messages`` are the conversation).
    """

    candidate: int
    source: str
    params: dict[str, Any]
    status: str
    feedback: str
    transcript: dict[str, Any] = field(default_factory=dict)


class LLMAgent(Agent):
    """Coding agent over the ``openai`` client.

    Settings:
        base_url: endpoint (default ``settings.LLM_BASE_URL``).
        model: model name (default ``settings.LLM_MODEL``).
        api_key: key (default ``settings.LLM_API_KEY``; a placeholder for keyless local servers).
        response_format: ``json_schema`` (default), ``json_object`` or ``none``; an endpoint that
            refuses it (HTTP 400/404/422) is asked again without it.
        temperature: sampling temperature (default 0.4).
        max_tokens: completion tokens per call (default 4096).
        timeout_s: total deadline of one call in s, also the read timeout (default 120).
        stream: 1 streams answers (default; the answer size cap acts while streaming), 0 not.
        max_attempts: calls per answer, malformed answers and endpoint errors included (default 3).
        max_repairs: repairs of a failed candidate in its conversation (default 2); each is a
            candidate whose parent is the failed one.
        backoff_s: first retry delay in s after an endpoint error, doubled each retry (default 1).
        price_prompt_per_mtok, price_completion_per_mtok: USD per million tokens (default 0).
        max_run_tokens: tokens (prompt + completion) the lane may spend per run; 0: no limit.
        max_run_cost_usd: USD the lane may spend per run; 0: no limit.
        concurrency: lane requests in flight at once (default 1).
        best_k: best kernels (own and others', each) whose source goes into the prompt (default 3).
    """

    kind = "llm"
    reads_context = True
    lane = True
    OTHER_SETTINGS = (
        ("base_url", lambda v: isinstance(v, str) and v.startswith(("http://", "https://")), "an http:// or https:// URL"),
        ("model", lambda v: isinstance(v, str), "a model name"),
        ("api_key", lambda v: isinstance(v, str), "a string"),
        ("response_format", lambda v: v in RESPONSE_FORMATS, "one of " + ", ".join(RESPONSE_FORMATS)),
    )
    NUMERIC_SETTINGS = (  # bounded: a retry loop must end in minutes, a cost stay finite
        ("temperature", 0.4, float, *between(0, 2)),  # the OpenAI API's range
        ("max_tokens", 4096, int, *between(16, 200_000)),
        ("timeout_s", 120.0, float, (lambda v: 0.0 < v <= 3600.0), "in (0, 3600]"),
        ("stream", 1, int, *between(0, 1)),
        ("max_attempts", 3, int, *between(1, 20)),
        ("max_repairs", 2, int, *between(0, 10)),
        ("backoff_s", 1.0, float, *between(0, 60)),
        ("price_prompt_per_mtok", 0.0, float, *between(0, 1e4)),
        ("price_completion_per_mtok", 0.0, float, *between(0, 1e4)),
        ("max_run_tokens", 0, int, *between(0, 1e10)),
        ("max_run_cost_usd", 0.0, float, *between(0, 1e6)),
        ("concurrency", 1, int, *between(1, 8)),
        ("best_k", 3, int, *between(0, 50)),
    )

    #: Completion tokens a call may still spend (the lane sets it from the run's token budget).
    tokens_left: int | None = None

    def propose(self, view: RunView, n: int) -> list[Proposal]:
        """``n`` fresh conversations, one after the other (the lane runs them on its own threads)."""
        return [self.converse(view) for _ in range(n)]

    def request_deadline_s(self) -> float:
        """Upper bound in s of one :meth:`converse` or :meth:`repair`: every attempt at its
        deadline, the backoff between them, and a read timeout's slack per attempt."""
        attempts = self.setting("max_attempts")
        backoff = self.setting("backoff_s") * (2 ** max(attempts - 1, 0) - 1)
        return attempts * 2 * self.setting("timeout_s") + backoff + 5.0

    def converse(self, view: RunView, cancel: threading.Event | None = None) -> Proposal:
        """A fresh conversation: the evidence prompt, answered until usable or out of attempts.

        Raises:
            Cancelled: ``cancel`` was set.
        """
        parents = view.best_kernels(1)
        parent = parents[0] if parents else None
        prompt = build_prompt(view, self.setting("best_k"), own=self.name)
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": prompt}]
        return self._answer(view, messages, cancel, attempt=1, chain=0,
                            parent=(parent.candidate, parent.source) if parent and parent.source else None)

    def repair(self, view: RunView, case: RepairCase, cancel: threading.Event | None = None) -> Proposal:
        """The next attempt of a failed candidate: its conversation plus what went wrong.

        Raises:
            Cancelled: ``cancel`` was set.
        """
        messages = [{**m, "content": storable(m.get("content") or "", MAX_MESSAGE_CHARS)}
                    for m in case.transcript.get("messages") or [] if isinstance(m, dict)]
        if not messages:
            messages = [{"role": "system", "content": SYSTEM_PROMPT},
                        {"role": "user", "content": build_prompt(view, self.setting("best_k"), own=self.name)},
                        {"role": "assistant", "content": case.source}]
        messages.append({"role": "user", "content": case.feedback + "\n\nFix the kernel. A unified diff against "
                         "it is accepted. Answer in the same format as before."})
        attempt = int(case.transcript.get("attempt") or 1) + 1
        chain = int(case.transcript.get("chain") or case.candidate)
        return self._answer(view, messages, cancel, attempt=attempt, chain=chain, parent=(case.candidate, case.source),
                            repair_of=case.candidate)

    # --- one answer ------------------------------------------------------------------------

    def _answer(self, view: RunView, messages: list[dict], cancel: threading.Event | None, *, attempt: int,
                chain: int, parent: tuple[int, str] | None, repair_of: int | None = None) -> Proposal:
        """Ask until an answer parses (malformed ones are answered in the conversation) or the
        attempts are spent; returns the proposal, failed or not, with its transcript."""
        calls: list[dict[str, Any]] = []
        errors: list[str] = []
        raw = ""
        delay = self.setting("backoff_s")
        for i in range(self.setting("max_attempts")):
            if cancel is not None and cancel.is_set():
                raise Cancelled()
            if self.tokens_left is not None and self.tokens_left <= 0:
                errors.append(f"call {i + 1}: not made: the lane's token budget is spent")
                break
            try:
                reply = self._call(self._client(), messages, cancel)  # one client a call: a watchdog may close it
            except Cancelled:
                raise
            except Exception as exc:  # noqa: BLE001 - endpoint errors of any kind are recorded
                errors.append(storable(f"call {i + 1}: {type(exc).__name__}: {exc}", 2000))
                calls.append({"error": errors[-1]})
                if cancel is not None and cancel.wait(delay):
                    raise Cancelled() from None
                if cancel is None:
                    time.sleep(delay)
                delay *= 2
                continue
            raw = reply.text
            calls.append({"latency_s": round(reply.latency_s, 3), "prompt_tokens": reply.prompt_tokens,
                          "completion_tokens": reply.completion_tokens, "finish_reason": reply.finish_reason,
                          "estimated": reply.estimated})
            if reply.finish_reason == "too_long":  # not re-sent: the cut answer is in the transcript
                errors.append(f"call {i + 1}: malformed answer: over {len(raw)} characters "
                              f"({ANSWER_CHARS_PER_TOKEN} a token of max_tokens), cut and refused")
                calls[-1]["error"] = errors[-1]
                messages = [*messages, {"role": "assistant", "content": "[an answer too long to keep]"},
                            {"role": "user", "content": f"That answer was refused: longer than "
                             f"{len(raw)} characters. Answer again, briefly, with one JSON object as specified."}]
                continue
            messages = [*messages, {"role": "assistant", "content": raw}]
            try:
                source, params, rationale = parse_answer(raw, view, parent[1] if parent else None)
            except MalformedAnswer as exc:
                if reply.finish_reason == "length":
                    exc = MalformedAnswer(f"{exc} (the answer was cut at max_tokens)")
                errors.append(f"call {i + 1}: malformed answer: {exc}")
                calls[-1]["error"] = errors[-1]
                messages.append({"role": "user", "content": f"That answer could not be used: {exc}. "
                                 "Answer again with one JSON object as specified."})
                continue
            transcript = self._transcript(messages, raw, rationale, calls, attempt, chain, repair_of)
            return Proposal(params=params, source=source, rationale=rationale,
                            parents=(parent[0],) if parent else (), transcript=transcript)
        transcript = self._transcript(messages, raw, "", calls, attempt, chain, repair_of)
        return Proposal(params={}, error=storable("; ".join(errors) or "no answer", 4000), raw=raw[:20000],
                        transcript=transcript)

    def _transcript(self, messages, raw, rationale, calls, attempt, chain, repair_of) -> dict[str, Any]:
        done = [c for c in calls if "latency_s" in c]
        return {
            "model": self._model(),
            "messages": [{**m, "content": storable(m.get("content") or "", MAX_MESSAGE_CHARS)} for m in messages],
            "answer": raw[:20000], "rationale": rationale,
            "prompt_tokens": sum(c["prompt_tokens"] for c in done),
            "completion_tokens": sum(c["completion_tokens"] for c in done),
            "latency_s": round(sum(c["latency_s"] for c in done), 3), "calls": calls,
            "attempt": attempt, "max_attempts": 1 + self.setting("max_repairs"), "chain": chain,
            "repair_of": repair_of,
        }

    def _model(self) -> str:
        from django.conf import settings as django_settings

        return self.settings.get("model") or django_settings.LLM_MODEL

    def _client(self):
        from django.conf import settings as django_settings
        from openai import OpenAI

        return OpenAI(
            base_url=self.settings.get("base_url") or django_settings.LLM_BASE_URL,
            api_key=self.settings.get("api_key") or django_settings.LLM_API_KEY or "not-needed",
            timeout=self.setting("timeout_s"),
            max_retries=0,  # retries are ours, so malformed answers and errors share one budget
        )

    def _call(self, client, messages: list[dict], cancel: threading.Event | None) -> Reply:
        """One chat-completions call within ``timeout_s``.

        Raises:
            Cancelled: ``cancel`` was set while it streamed.
            DeadlineExceeded: the deadline passed while it streamed.
            openai.APIError and subclasses: the endpoint's errors.
        """
        import openai

        max_tokens = self.setting("max_tokens")
        if self.tokens_left is not None:
            max_tokens = max(16, min(max_tokens, self.tokens_left))
        kwargs: dict[str, Any] = dict(model=self._model(), messages=messages, temperature=self.setting("temperature"),
                                      max_tokens=max_tokens)
        fmt = self.settings.get("response_format") or "json_schema"
        if fmt == "json_schema":
            kwargs["response_format"] = {"type": "json_schema", "json_schema": {"name": "kernel", "schema": ANSWER_SCHEMA}}
        elif fmt == "json_object":
            kwargs["response_format"] = {"type": "json_object"}
        try:
            reply = self._send(client, kwargs, cancel)
        except (openai.BadRequestError, openai.NotFoundError, openai.UnprocessableEntityError):
            if "response_format" not in kwargs:
                raise
            kwargs.pop("response_format")  # an endpoint without structured output: ask plainly
            reply = self._send(client, kwargs, cancel)
        self._count(reply)
        return reply

    def _send(self, client, kwargs: dict[str, Any], cancel: threading.Event | None) -> Reply:
        """One request within ``timeout_s`` in all: a watchdog closes the response (or, not
        streaming, the client) at the deadline or on cancellation, which ends any read.

        Raises:
            Cancelled, DeadlineExceeded: the watchdog ended it.
        """
        start = time.monotonic()
        timeout = self.setting("timeout_s")
        limit = ANSWER_CHARS_PER_TOKEN * kwargs["max_tokens"]
        fired: list[str] = []
        done = threading.Event()
        target: list[Any] = [client]

        def watch() -> None:
            end = start + timeout
            while not done.is_set():
                left = end - time.monotonic()
                if cancel is not None and cancel.is_set():
                    fired.append("cancelled")
                elif left <= 0:
                    fired.append("deadline")
                else:
                    done.wait(min(left, 0.05))
                    continue
                try:
                    target[-1].close()
                except Exception:  # noqa: BLE001 - closing a half-read response may raise; it is closed
                    pass
                return

        watchdog = threading.Thread(target=watch, name="llm-call-watchdog", daemon=True)
        watchdog.start()
        parts: list[str] = []
        usage, finish = None, ""

        def ended(exc: BaseException | None) -> Exception | None:
            if "cancelled" in fired:
                return Cancelled()
            if fired:
                return DeadlineExceeded(f"no complete answer within {timeout:g} s "
                                        f"({sum(map(len, parts))} characters received)")
            return None

        try:
            if not self.setting("stream"):
                response = client.chat.completions.create(**kwargs)
                text = (response.choices[0].message.content or "") if response.choices else ""
                finish = (response.choices[0].finish_reason or "") if response.choices else ""
                if len(text) > limit:
                    text, finish = text[:limit], "too_long"
                return self._reply(kwargs, text, getattr(response, "usage", None), time.monotonic() - start, finish)
            stream = client.chat.completions.create(**kwargs, stream=True, stream_options={"include_usage": True})
            target.append(stream.response)
            try:
                received = 0
                for chunk in stream:
                    if fired:
                        break
                    if getattr(chunk, "usage", None):
                        usage = chunk.usage
                    for choice in chunk.choices or ():
                        if choice.delta is not None and choice.delta.content:
                            parts.append(choice.delta.content)
                            received += len(choice.delta.content)
                        if choice.finish_reason:
                            finish = choice.finish_reason
                    if received > limit:
                        finish = "too_long"
                        break
            finally:
                stream.close()  # ends the connection: the server stops generating
        except Exception as exc:
            why = ended(exc)
            if why is not None:
                raise why from None
            raise
        finally:
            done.set()
        why = ended(None)
        if why is not None:
            raise why
        text = "".join(parts)
        return self._reply(kwargs, text[:limit], usage, time.monotonic() - start, finish)

    @staticmethod
    def _reply(kwargs: dict, text: str, usage, latency_s: float, finish: str) -> Reply:
        """The reply in storable text; tokens as reported when they are counts (finite, >= 0,
        under ``MAX_REPORTED_TOKENS``), else estimated at 4 characters a token (``estimated``)."""
        text = storable(text)

        def count(v) -> int | None:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                return None
            return int(v) if 0 <= v <= MAX_REPORTED_TOKENS else None

        prompt = count(getattr(usage, "prompt_tokens", None))
        completion = count(getattr(usage, "completion_tokens", None))
        if prompt is None or completion is None:  # no usable usage reported: 4 characters a token
            chars = sum(len(m.get("content") or "") for m in kwargs["messages"])
            return Reply(text, chars // 4, len(text) // 4, latency_s, finish, estimated=True)
        return Reply(text, prompt, completion, latency_s, finish)

    def _count(self, reply: Reply) -> None:
        cost = (reply.prompt_tokens * self.setting("price_prompt_per_mtok")
                + reply.completion_tokens * self.setting("price_completion_per_mtok")) / 1e6
        for k, v in (("calls", 1), ("prompt_tokens", reply.prompt_tokens),
                     ("completion_tokens", reply.completion_tokens), ("cost_usd", cost)):
            self.usage[k] = self.usage.get(k, 0) + v
        if self.tokens_left is not None:
            self.tokens_left -= reply.prompt_tokens + reply.completion_tokens


def budget_left(settings: dict[str, Any], spent: dict[str, float]) -> tuple[int | None, str]:
    """Tokens left to a lane of an agent with ``settings`` after ``spent`` (its usage), and why
    it is spent ("" while it is not). None: no token limit.

    Raises:
        ValueError: settings the agent refuses.
    """
    agent = LLMAgent(0, **settings)
    tokens = spent.get("prompt_tokens", 0) + spent.get("completion_tokens", 0)
    max_tokens, max_cost = agent.setting("max_run_tokens"), agent.setting("max_run_cost_usd")
    if max_tokens and tokens >= max_tokens:
        return 0, f"token budget spent: {int(tokens)} of {max_tokens} tokens"
    if max_cost and spent.get("cost_usd", 0) >= max_cost:
        return 0, f"cost budget spent: {spent.get('cost_usd', 0):.4f} of {max_cost:g} USD"
    return (int(max_tokens - tokens) if max_tokens else None), ""
