"""LLM coding agent: asks a model behind any OpenAI-compatible endpoint for complete kernels.

The prompt carries the workload's math and candidate contract, the template, the best
candidates' source with their evidence, recent failures with their logs, and the insights.
The model answers with a JSON object ``{"source": ..., "params": {...}, "rationale": ...}``
(a fenced code block plus prose is accepted too). A malformed answer or an endpoint error is
retried with exponential backoff; what still fails becomes a failed :class:`Proposal` (kept as
evidence), never an exception.
"""

from __future__ import annotations

import json
import logging
import re
import time
from typing import Any

from swarm.agents.base import Agent, Observation, Proposal, RunView, between

log = logging.getLogger(__name__)

SYSTEM_PROMPT = (
    "You are a GPU/CPU kernel performance engineer. You write complete, correct, fast kernels "
    "that follow the given candidate contract exactly. Answer with one JSON object and nothing "
    'else: {"source": "<complete kernel source>", "params": {"NAME": value, ...}, '
    '"rationale": "<why this should be faster>"}. Parameters in "params" are prepended to the '
    "source as #define lines."
)

_FENCE = re.compile(r"```(?:json|c|cpp|cuda|C)?\s*\n(.*?)```", re.S)


class MalformedAnswer(ValueError):
    """The model's answer is not a usable kernel proposal."""


class LLMAgent(Agent):
    """Coding agent over the ``openai`` client.

    Settings:
        base_url: endpoint (default ``settings.LLM_BASE_URL``).
        model: model name (default ``settings.LLM_MODEL``).
        api_key: key (default ``settings.LLM_API_KEY``; a placeholder for keyless local servers).
        temperature: sampling temperature (default 0.4).
        timeout_s: per-request timeout in seconds (default 120).
        max_attempts: attempts per proposal, malformed answers included (default 3).
        backoff_s: first retry delay in seconds, doubled each retry (default 1.0).
        price_prompt_per_mtok, price_completion_per_mtok: USD per million tokens, for the
            run's cost figure (default 0).
        best_k: best candidates whose source goes into the prompt (default 3).
    """

    kind = "llm"
    reads_context = True
    OTHER_SETTINGS = (
        ("base_url", lambda v: isinstance(v, str) and v.startswith(("http://", "https://")), "an http:// or https:// URL"),
        ("model", lambda v: isinstance(v, str), "a model name"),
        ("api_key", lambda v: isinstance(v, str), "a string"),
    )
    NUMERIC_SETTINGS = (  # bounded: a retry loop must end in minutes, a cost stay finite
        ("temperature", 0.4, float, *between(0, 2)),  # the OpenAI API's range
        ("timeout_s", 120.0, float, (lambda v: 0.0 < v <= 3600.0), "in (0, 3600]"),
        ("max_attempts", 3, int, *between(1, 20)),
        ("backoff_s", 1.0, float, *between(0, 60)),
        ("price_prompt_per_mtok", 0.0, float, *between(0, 1e4)),
        ("price_completion_per_mtok", 0.0, float, *between(0, 1e4)),
        ("best_k", 3, int, *between(0, 50)),
    )

    def propose(self, view: RunView, n: int) -> list[Proposal]:
        client = self._client()
        prompt = build_prompt(view, self.setting("best_k"))
        return [self._one(client, prompt, view) for _ in range(n)]

    def _client(self):
        from django.conf import settings as django_settings
        from openai import OpenAI

        return OpenAI(
            base_url=self.settings.get("base_url") or django_settings.LLM_BASE_URL,
            api_key=self.settings.get("api_key") or django_settings.LLM_API_KEY or "not-needed",
            timeout=self.setting("timeout_s"),
            max_retries=0,  # retries are ours, so malformed answers and errors share one budget
        )

    def _one(self, client, prompt: str, view: RunView) -> Proposal:
        from django.conf import settings as django_settings

        attempts = self.setting("max_attempts")
        delay = self.setting("backoff_s")
        model = self.settings.get("model") or django_settings.LLM_MODEL
        errors, raw = [], ""
        for attempt in range(attempts):
            if attempt:
                time.sleep(delay * 2 ** (attempt - 1))
            try:
                response = client.chat.completions.create(
                    model=model,
                    temperature=self.setting("temperature"),
                    messages=[{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": prompt}],
                )
                self._count(response)
                raw = (response.choices[0].message.content or "") if response.choices else ""
                source, params, rationale = parse_answer(raw, view)
                return Proposal(params=params, source=source, rationale=rationale,
                                parents=tuple(o.candidate for o in view.ranked()[:1]))
            except MalformedAnswer as exc:
                errors.append(f"attempt {attempt + 1}: malformed answer: {exc}")
            except Exception as exc:  # noqa: BLE001 - endpoint errors of any kind are recorded
                errors.append(f"attempt {attempt + 1}: {type(exc).__name__}: {exc}")
        return Proposal(params={}, error="; ".join(errors), raw=raw[:20000])

    def _count(self, response) -> None:
        usage = getattr(response, "usage", None)
        prompt = getattr(usage, "prompt_tokens", 0) or 0
        completion = getattr(usage, "completion_tokens", 0) or 0
        cost = (prompt * self.setting("price_prompt_per_mtok")
                + completion * self.setting("price_completion_per_mtok")) / 1e6
        for k, v in (("calls", 1), ("prompt_tokens", prompt), ("completion_tokens", completion), ("cost_usd", cost)):
            self.usage[k] = self.usage.get(k, 0) + v


def parse_answer(raw: str, view: RunView) -> tuple[str, dict[str, Any], str]:
    """Extract ``(source, params, rationale)`` from a model answer.

    Raises:
        MalformedAnswer: no JSON object or code block, no source, or a source that does not
            define the workload's entry point; params that are not a flat dict of numbers.
    """
    text = raw.strip()
    obj = _json_object(text)
    if obj is not None:
        source = obj.get("source")
        params = obj.get("params") or {}
        rationale = str(obj.get("rationale") or "")
    else:
        fences = _FENCE.findall(text)
        if not fences:
            raise MalformedAnswer("neither a JSON object nor a fenced code block")
        source, params = fences[0], {}
        rationale = _FENCE.sub("", text).strip()
    if not isinstance(source, str) or not source.strip():
        raise MalformedAnswer("empty or missing 'source'")
    if not isinstance(params, dict) or not all(
        isinstance(k, str) and re.fullmatch(r"[A-Za-z_]\w*", k) and isinstance(v, (int, float)) and not isinstance(v, bool)
        for k, v in params.items()
    ):
        raise MalformedAnswer("'params' must map C identifiers to numbers")
    entry = view.workload.split(":")[-1]
    if not re.search(rf"\b{re.escape(entry)}\s*\(", source):
        raise MalformedAnswer(f"the source does not define the entry point '{entry}'")
    return source, params, rationale[:4000]


def _json_object(text: str) -> dict | None:
    candidates = [text] + _FENCE.findall(text)
    for c in candidates:
        c = c.strip()
        if c.startswith("{"):
            try:
                obj = json.loads(c)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                return obj
    return None


def build_prompt(view: RunView, best_k: int = 3) -> str:
    """The user prompt: contract, template, best candidates with evidence, failures, insights."""
    parts = [
        f"# Goal\nWorkload `{view.workload}` on target `{view.target}`. Objectives: "
        + ", ".join(f"{o['direction']} {o['metric']}" for o in view.objectives)
        + ". Constraints: "
        + (", ".join(f"{c['metric']} {c['op']} {c['value']}" for c in view.constraints) or "none")
        + ".",
        f"# Workload math and candidate contract\n{view.contract}",
        f"# Template (parameters arrive as #define lines)\n```c\n{view.template}\n```",
    ]
    best = [o for o in view.ranked() if o.status == "ok"][:best_k]
    if best:
        parts.append("# Best candidates so far")
        for o in best:
            parts.append(_describe(o) + (f"\n```c\n{o.source}\n```" if o.source else ""))
    failures = [o for o in reversed(view.history) if o.status != "ok"][:3]
    if failures:
        parts.append("# Recent failures")
        for o in failures:
            parts.append(_describe(o) + f"\nlog:\n```\n{o.log[-1500:]}\n```")
    if view.insights:
        parts.append("# Insights from earlier evaluations\n" + "\n".join(f"- {i['kind']}: {json.dumps(i['data'])}" for i in view.insights[:12]))
    parts.append("Write a new complete kernel that should beat the best candidate. Answer with the JSON object only.")
    return "\n\n".join(parts)


def _describe(o: Observation) -> str:
    metrics = ", ".join(f"{k}={v:.4g}" for k, v in o.metrics.items() if isinstance(v, (int, float)) and "[" not in k)
    return f"- candidate {o.candidate} ({o.status}), params {o.params}: {metrics}"
