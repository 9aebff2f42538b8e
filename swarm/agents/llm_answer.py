"""What an LLM agent accepts as an answer, and nothing else.

Accepted forms:

* one JSON object ``{"source": "<complete kernel>", "params": {...}, "rationale": "..."}``
  (``"diff"`` in place of ``"source"``: a unified diff against the parent kernel), bare or in
  a ```json fence;
* one fenced C/CUDA block (```c, ```cpp, ```cuda or unlabelled) or one ```diff block, with an
  optional fenced JSON object ``{"params": {...}, "rationale": "..."}``; prose outside the
  fences is the rationale when the JSON gives none.

A JSON fence that does not parse is refused, never compiled as C; ``params`` must name
parameters of the run's design space with values from their lists, and the restrictions over
the parameters given must hold (a kernel's own constants belong in its source). Text holding a
lone surrogate or NUL (which no database column stores) is refused; :func:`storable` is the
form in which any answer text is stored or sent back.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from swarm.agents.base import RunView

#: ``response_format`` schema of an answer (OpenAI structured outputs; vLLM, SGLang and
#: llama.cpp accept the same ``json_schema``).
ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "source": {"type": "string", "description": "complete kernel source"},
        "params": {"type": "object", "additionalProperties": {"type": "number"}},
        "rationale": {"type": "string"},
    },
    "required": ["source", "params", "rationale"],
}

_BLOCK = re.compile(r"```[ \t]*([A-Za-z+]*)[^\n]*\n(.*?)```", re.S)
_CODE = {"", "c", "cpp", "c++", "cc", "cu", "cuda", "h"}
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


class MalformedAnswer(ValueError):
    """The model's answer is not a usable kernel proposal (the message says why)."""


def storable(text: str, limit: int | None = None) -> str:
    """``text`` with NUL and lone surrogates (UTF-16 halves, not encodable as UTF-8) replaced
    by U+FFFD, cut to ``limit`` characters when given; what PostgreSQL text and jsonb accept."""
    text = _UNSTORABLE.sub("\ufffd", text if isinstance(text, str) else str(text))
    if limit is not None and len(text) > limit:
        text = text[:limit] + f"\n[... cut: {len(text) - limit} more characters]"
    return text


def _check_storable(value: str, what: str) -> None:
    m = _UNSTORABLE.search(value)
    if m:
        kind = "a NUL character" if m.group() == "\x00" else "a lone surrogate escape"
        raise MalformedAnswer(f"{what} holds {kind} at character {m.start()}; send plain UTF-8 text")


def parse_answer(raw: str, view: RunView, parent_source: str | None = None) -> tuple[str, dict[str, Any], str]:
    """``(source, params, rationale)`` of a model answer.

    Args:
        raw: the answer text.
        view: the run (its design space and workload entry point).
        parent_source: the kernel a diff applies to (None: diffs are refused).

    Raises:
        MalformedAnswer: none of the accepted forms; invalid JSON where JSON is given; more
            than one code block; a diff that does not apply cleanly; no source; ``params``
            that are not numbers keyed by the space's parameter names; a source that does not
            define the workload's entry point.
    """
    text = raw.strip()
    blocks = [(lang.lower(), body) for lang, body in _BLOCK.findall(text)]
    obj: dict[str, Any] = {}
    code: list[str] = []
    diffs: list[str] = []
    if text.startswith("{"):
        obj = _load(text, "the answer")
    else:
        json_blocks = [b for lang, b in blocks if lang == "json" or (lang == "" and b.lstrip().startswith("{"))]
        if len(json_blocks) > 1:
            raise MalformedAnswer("more than one JSON block; send one")
        if json_blocks:
            obj = _load(json_blocks[0], "the ```json block")
        code = [b for lang, b in blocks if lang in _CODE and not (lang == "" and b.lstrip().startswith("{"))]
        diffs = [b for lang, b in blocks if lang in ("diff", "patch")]
    source, diff = obj.get("source"), obj.get("diff")
    if source is None and diff is None:
        if len(code) > 1:
            raise MalformedAnswer(f"{len(code)} code blocks; send the complete kernel in one")
        if code:
            source = code[0]
        elif len(diffs) == 1:
            diff = diffs[0]
        elif diffs:
            raise MalformedAnswer(f"{len(diffs)} diff blocks; send one")
        else:
            raise MalformedAnswer("neither a JSON object, nor a fenced C/CUDA block, nor a diff")
    if diff is not None:
        if not isinstance(diff, str):
            raise MalformedAnswer("'diff' must be a string")
        if parent_source is None:
            raise MalformedAnswer("a diff needs a parent kernel and this conversation has none; send the source")
        source = apply_diff(parent_source, diff)
    if not isinstance(source, str) or not source.strip():
        raise MalformedAnswer("empty or missing 'source'")
    _check_storable(source, "the source")
    params = obj.get("params") or {}
    if not isinstance(params, dict) or not all(
        isinstance(k, str) and re.fullmatch(r"[A-Za-z_]\w*", k) and isinstance(v, (int, float)) and not isinstance(v, bool)
        for k, v in params.items()
    ):
        raise MalformedAnswer("'params' must map C identifiers to numbers")
    unknown = sorted(set(params) - set(view.space.names))
    if unknown:
        raise MalformedAnswer(f"'params' names {', '.join(unknown)}, not parameters of the design space "
                              f"({', '.join(view.space.names) or 'none'}); put the kernel's own constants in its source")
    _check_in_space(params, view.space)
    entry = view.workload.split(":")[-1]
    if not re.search(rf"\b{re.escape(entry)}\s*\(", source):
        raise MalformedAnswer(f"the source does not define the entry point '{entry}'")
    rationale = obj.get("rationale")
    if not isinstance(rationale, str) or not rationale.strip():
        rationale = _BLOCK.sub("", text).strip() if not text.startswith("{") else ""
    _check_storable(rationale, "the rationale")
    return source, params, rationale[:4000]


def _check_in_space(params: dict[str, Any], space) -> None:
    """Each value one of its parameter's values; every restriction whose names are all given
    holds (one naming a parameter left out is the kernel's business: its source sets it).

    Raises:
        MalformedAnswer: naming the parameter and its allowed values, or the broken restriction.
    """
    for p in space.parameters:
        if p.name in params and params[p.name] not in p.values:
            raise MalformedAnswer(f"'params' sets {p.name} = {params[p.name]!r}, not one of its values "
                                  f"{list(p.values)}")
    given, names = set(params), set(space.names)
    broken = [t for t in space.broken_restrictions(params) if _names(t) & names <= given]
    if broken:
        raise MalformedAnswer(f"'params' {params} break the design space's restrictions: {'; '.join(broken)}")


def _names(expr: str) -> set[str]:
    return {n.id for n in ast.walk(ast.parse(expr, mode="eval")) if isinstance(n, ast.Name)}


def _load(text: str, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MalformedAnswer(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise MalformedAnswer(f"{what} is JSON but not an object")
    return obj


def apply_diff(base: str, diff: str) -> str:
    """``base`` with the unified diff ``diff`` applied; every context and removed line must
    match (trailing blanks aside) at the hunk's position, or within 20 lines of it.

    Raises:
        MalformedAnswer: a diff naming more than one file (``---``/``+++`` header pairs or
            ``diff --git`` lines), no hunk, a malformed hunk, or a hunk that does not apply.
    """
    files = sum(1 for a, b in zip(diff.split("\n"), diff.split("\n")[1:]) if a.startswith("--- ") and b.startswith("+++ "))
    files = max(files, sum(1 for line in diff.split("\n") if line.startswith("diff --git ")))
    if files > 1:
        raise MalformedAnswer(f"the diff names {files} files; send a diff of the kernel alone")
    lines = base.split("\n")
    hunks: list[tuple[int, list[str], list[str]]] = []  # start (0-based), old lines, new lines
    current: tuple[int, list[str], list[str]] | None = None
    for line in diff.split("\n"):
        m = _HUNK.match(line)
        if m:
            current = (max(int(m.group(1)) - 1, 0), [], [])
            hunks.append(current)
        elif current is None or line.startswith(("--- ", "+++ ", "diff ", "index ")):
            continue
        elif line.startswith("+"):
            current[2].append(line[1:])
        elif line.startswith("-"):
            current[1].append(line[1:])
        elif line.startswith(" ") or line == "":
            current[1].append(line[1:])
            current[2].append(line[1:])
        elif line.startswith("\\"):
            continue  # "\ No newline at end of file"
        else:
            raise MalformedAnswer(f"the diff has a line that is neither context, '+' nor '-': {line[:80]!r}")
    if not hunks:
        raise MalformedAnswer("the diff has no @@ hunk")
    out, offset = list(lines), 0
    for n, (start, old, new) in enumerate(hunks, 1):
        while old and new and old[-1] == "" and new[-1] == "":  # a blank line closing the block
            old, new = old[:-1], new[:-1]
        at = _find(out, old, start + offset)
        if at is None:
            raise MalformedAnswer(f"hunk {n} of the diff does not apply to the parent kernel (its lines "
                                  f"{start + 1}-{start + len(old)} differ)")
        out[at:at + len(old)] = new
        offset += len(new) - len(old)
    return "\n".join(out)


def _find(lines: list[str], old: list[str], near: int) -> int | None:
    def fits(i: int) -> bool:
        return 0 <= i and i + len(old) <= len(lines) and all(
            a.rstrip() == b.rstrip() for a, b in zip(lines[i:i + len(old)], old))

    for d in range(21):
        for i in (near - d, near + d):
            if fits(i):
                return i
    return None
