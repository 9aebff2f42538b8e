"""Engineers' directions: validated when submitted, applied when the run next proposes
candidates (:func:`swarm.runs.orchestrator.propose_generation`, after every evaluation), marked
``not_applied`` when the run ends first (:func:`swarm.runs.progress.finish`)."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from kernels import DesignSpace, SpaceError
from kernels.space import labelled_value
from swarm.models import AgentRecord, AuditEvent, CandidateStatus, Direction, Run
from swarm.runs import remaining
from swarm.runs.history import goal_rows
from swarm.runs.progress import finish

Kind = Direction.Kind


class DirectionError(ValueError):
    """A direction that cannot be applied; the message says why."""


def submit(run: Run, kind: str, payload: dict[str, Any], author=None) -> Direction:
    """Validate and record a direction for ``run`` (applied when the run next proposes).

    Raises:
        DirectionError: unknown kind, malformed payload, a range that would leave a parameter
            without values, an invalid restriction, a narrowing or restriction that leaves no
            point to evaluate (none valid, or every valid one already has a candidate), an
            unknown agent, or a finished run.
    """
    if run.state != Run.State.RUNNING:
        raise DirectionError(f"run {run.pk} is {run.state}; directions apply to running runs")
    if kind not in Kind.values:
        raise DirectionError(f"unknown direction {kind!r}; known: {', '.join(Kind.values)}")
    payload = dict(payload or {})
    if kind in (Kind.NARROW, Kind.EXCLUDE):  # named by label or value now, stored as values
        payload = _resolved(run.design_space(), payload)
    _effect(run, kind, payload)  # dry run: raises on anything that would not apply
    with transaction.atomic():
        d = Direction.objects.create(run=run, kind=kind, payload=payload, author=author)
        AuditEvent.objects.create(actor=author, verb=f"direction.{kind}", subject=f"run {run.pk}", data=payload)
    return d


def apply_pending(run: Run, generation: int) -> list[Direction]:
    """Apply the run's pending directions in order; called inside the run's row lock.

    A direction that no longer applies (e.g. two narrowings that together empty a range) is
    marked ``rejected`` with the reason; nothing else changes. Once one ends the run (a
    ``stop``), the rest are left to :func:`swarm.runs.progress.finish`, which marked them
    ``not_applied``.
    """
    done = []
    for d in run.directions.filter(state=Direction.State.PENDING).order_by("created_at", "id"):
        if run.state != Run.State.RUNNING:
            break
        try:
            effect = _effect(run, d.kind, d.payload, apply=True, direction=d)
            d.state = Direction.State.APPLIED
        except DirectionError as exc:
            effect = {"rejected": str(exc)}
            d.state = Direction.State.REJECTED
        d.effect = effect
        d.applied_at = timezone.now()
        d.applied_generation = generation
        d.save(update_fields=["state", "effect", "applied_at", "applied_generation"])
        done.append(d)
    return done


def _resolved(space: DesignSpace, payload: dict[str, Any]) -> dict[str, Any]:
    """A narrowing's or exclusion's ``payload`` with each of its ``values`` named as a value of
    the parameter: a labelled parameter (a recorded name per value, say) may be named by its
    labels, as every page shows it, or by its values.

    Raises:
        DirectionError: a name that is both the label of one value and another value (name it
            by its label instead), or a bool that is no label (a bool is never a value).
    """
    param = next((x for x in space.parameters if x.name == payload.get("param")), None)
    values = payload.get("values")
    if param is None or not param.labels or not isinstance(values, list):
        return payload  # _effect names what is wrong
    out = []
    for v in values:
        by_label = [value for value, label in zip(param.values, param.labels) if _same(label, v)]
        is_value = not isinstance(v, bool) and isinstance(v, int | float) and v in param.values
        if by_label and is_value and by_label[0] != v:
            raise DirectionError(f"{param.name}: {v!r} is both the label of value {by_label[0]!r} and value {v!r} "
                                 f"(labelled {labelled_value(param.labels, v, param.values)!r}); name values by their "
                                 f"labels: {list(param.labels)}")
        if isinstance(v, bool) and not by_label:
            raise DirectionError(f"{param.name} has no label {v!r}; labels: {list(param.labels)}")
        out.append(by_label[0] if by_label else v)
    return {**payload, "values": out}


def _same(label: Any, v: Any) -> bool:
    """Whether ``v`` names ``label``, as JSON tells them apart (``true`` is not ``1``, nor ``"1"``)."""
    if isinstance(label, bool) or isinstance(v, bool):
        return isinstance(label, bool) and isinstance(v, bool) and label == v
    if isinstance(label, int | float) and isinstance(v, int | float):
        return label == v
    return type(label) is type(v) and label == v


def _effect(run: Run, kind: str, p: dict[str, Any], apply: bool = False,
            direction: Direction | None = None) -> dict[str, Any]:
    space = run.design_space()
    if kind in (Kind.NARROW, Kind.EXCLUDE):
        name, values = p.get("param"), p.get("values")
        param = next((x for x in space.parameters if x.name == name), None)
        if param is None:
            raise DirectionError(f"unknown parameter {name!r}; known: {', '.join(space.names)}")
        if not isinstance(values, list) or not values:
            raise DirectionError("'values' must be a non-empty list")
        unknown = [v for v in values if isinstance(v, bool) or v not in param.values]
        if unknown:
            raise DirectionError(f"{name} has no value(s) {unknown}; values: {list(param.values)}"
                                 + (f" (labels: {list(param.labels)})" if param.labels else ""))
        kept = [i for i, v in enumerate(param.values) if (v in values) == (kind == Kind.NARROW)]
        if not kept:
            raise DirectionError(f"this would leave {name} without any value")
        d = space.to_dict()
        for x in d["parameters"]:
            if x["name"] == name:
                x["values"] = [param.values[i] for i in kept]
                if param.labels:  # each kept value keeps its label
                    x["labels"] = [param.labels[i] for i in kept]
        return _set_space(run, d, space, apply)
    if kind == Kind.ADD_RESTRICTION:
        expr = str(p.get("expression", "")).strip()
        if not expr:
            raise DirectionError("'expression' is empty")
        d = space.to_dict()
        d["restrictions"] = [*d["restrictions"], expr]
        return _set_space(run, d, space, apply)
    if kind == Kind.SET_CONSTRAINT:
        metric, op, value = p.get("metric"), p.get("op"), p.get("value")
        if not isinstance(metric, str) or not metric or op not in ("<=", ">="):
            raise DirectionError("a constraint needs 'metric' and 'op' of '<=' or '>='")
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise DirectionError(f"constraint value {value!r} is not a number") from None
        before = list(run.constraints)
        after = [c for c in before if c["metric"] != metric] + [{"metric": metric, "op": op, "value": value}]
        if apply:
            run.constraints = after
            run.save(update_fields=["constraints"])
        return {"constraints_before": before, "constraints_after": after}
    if kind in (Kind.BOOST_AGENT, Kind.PAUSE_AGENT, Kind.RESUME_AGENT):
        agent = run.agents.filter(name=p.get("agent")).first()
        if agent is None:
            raise DirectionError(f"no agent {p.get('agent')!r} in run {run.pk}; agents: {', '.join(run.agents.values_list('name', flat=True))}")
        if kind == Kind.BOOST_AGENT:
            try:
                factor = float(p.get("factor", 2.0))
            except (TypeError, ValueError):
                raise DirectionError("'factor' must be a number") from None
            if not 0 < factor <= 100:
                raise DirectionError("'factor' must be in (0, 100]")
            changes = {"boost": factor}
        else:
            changes = {"paused": kind == Kind.PAUSE_AGENT}
        before = {k: getattr(agent, k) for k in changes}
        if apply:
            AgentRecord.objects.filter(pk=agent.pk).update(**changes)
        return {"agent": agent.name, "before": before, "after": changes}
    if kind == Kind.STOP:
        if apply:
            author = direction.author if direction is not None else None
            who = author.get_username() if author is not None else "a direction without an author"
            # As a stop on the run page: queued candidates go, running ones finish and are kept.
            run.candidates.filter(status=CandidateStatus.QUEUED).delete()
            if direction is not None:  # applied, not left to finish() as pending
                Direction.objects.filter(pk=direction.pk).update(state=Direction.State.APPLIED)
            finish(run, Run.State.STOPPED, Run.EndKind.STOPPED,
                   f"stopped by {who} (direction {direction.pk if direction is not None else '?'}, "
                   f"applied before generation {run.generation + 1})")
        return {"state": "stopped"}
    raise DirectionError(f"unknown direction {kind!r}")


def _set_space(run: Run, d: dict, before: DesignSpace, apply: bool) -> dict[str, Any]:
    try:
        after = DesignSpace.from_dict(d)
    except SpaceError as exc:
        raise DirectionError(str(exc)) from None
    _require_open_point(run, after)
    if apply:
        run.space = after.to_dict()
        run.save(update_fields=["space"])
    return {"space_size_before": before.cartesian_size(), "space_size_after": after.cartesian_size()}


def _require_open_point(run: Run, space: DesignSpace) -> None:
    """Refuse a space in which the run would have nothing to evaluate.

    A run with an LLM agent may still propose new sources at evaluated points, so there only
    a space without any valid point is refused.

    Raises:
        DirectionError: no point of ``space`` satisfies its restrictions, or (no LLM agent)
            every valid point already has a candidate of the goal.
    """
    if not remaining.has_valid_point(space):
        rules = "; ".join(space.restrictions) or "none"
        raise DirectionError(
            f"this direction leaves no point to evaluate: none of the {space.cartesian_size()} points of the "
            f"space it leaves satisfies the restrictions ({rules})")
    if run.agents.filter(kind="llm").exists():
        return
    rows = goal_rows(run.goal)
    if remaining.open_point(space, remaining.seen_keys(space, rows)) is None:
        raise DirectionError(
            f"this direction leaves no point to evaluate: every valid point of the space it leaves already has "
            f"a candidate (the goal holds {len(rows)})")
