"""The generation loop: propose, deduplicate, evaluate, store, publish, learn, advance.

The same functions serve the Celery tasks (``swarm.tasks``) and the headless command
(``manage.py factory run``), so a run behaves the same whichever way it is driven.

Work is claimed with a conditional UPDATE (``queued -> running``, healthchecks' pattern), so a
redelivered task never evaluates a candidate twice. A ``running`` claim is taken over when its
holder is provably dead (same host, process gone) or older than :func:`stale_after`; each
take-over is recorded in the candidate's retry history.
"""

from __future__ import annotations

import functools
import logging
import secrets
import zlib
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError, transaction
from django.db.models import Case, F, Q, Value, When
from django.utils import timezone

import kernels
from kernels.backends import get_backend
from swarm.agents import DEFAULT_MIX, Proposal, RunView, make_agent
from swarm.learning import store as insight_store
from swarm.learning.credit import (
    DEFAULT_ENDGAME_SHARE,
    Arm,
    allocate,
    endgame_evaluations,
    endgame_shares,
    frontier_improvements,
)
from swarm.models import (
    PENDING_STATUSES,
    UNJUDGED_STATUSES,
    AgentRecord,
    AuditEvent,
    Candidate,
    CandidateStatus,
    Evidence,
    Generation,
    Goal,
    ProposalFailure,
    Run,
)
from swarm.runs import baselines, directions, events, llm_lane, pruning, remaining
from swarm.runs.agent_view import climbs, reads_context, reads_related, run_view
from swarm.runs.claims import claim_many, holder_is_dead, stale_after, worker_identity
from swarm.runs.history import goal_rows as history_rows
from swarm.runs.noise_floors import floor_for
from swarm.runs.progress import finish, run_state

log = logging.getLogger(__name__)

EvaluateFn = Callable[..., Any]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MAX_REUSE_ROUNDS = 100


def backend_fingerprint(goal: Goal) -> dict[str, Any]:
    """Environment fingerprint of the goal's target: compiler, flags and CPU on this host, or
    the recorded data set of a ``replay:`` target."""
    if goal.capabilities.recorded:
        goal.ensure_dataset()
        return _fingerprint(goal.backend, goal.target)
    return _fingerprint(goal.backend, None)


@functools.cache
def _fingerprint(backend: str, target: str | None) -> dict[str, Any]:
    b = get_backend(backend)
    return b.fingerprint(target) if target else b.fingerprint()


START_GRACE = timedelta(seconds=60)  # a run still at generation 0 after this was left half-started


# --- starting and advancing runs --------------------------------------------------------------


def start_run(
    goal: Goal,
    *,
    budget: int,
    seed: int | None = None,
    batch_size: int = 4,
    user=None,
    agents: list[dict[str, Any]] | None = None,
    max_wall_s: float | None = None,
) -> tuple[Run, list[Candidate]]:
    """Create a run with its agents and propose its first generation.

    Args:
        goal: the goal to search.
        budget: maximum number of candidates (evaluations, failures included), >= 1.
        seed: seed of the agents' RNGs in [0, 2**31); random when None (recorded on the run).
        batch_size: candidates per generation, >= 1.
        agents: ``[{"name", "kind", "settings"}]``; default :data:`swarm.agents.DEFAULT_MIX`.
        max_wall_s: optional wall-time budget in seconds; no generation starts after it.

    Returns:
        The run and the candidates to evaluate first (hand them to
        :func:`swarm.runs.dispatch.dispatch` or evaluate them in-process).

    Raises:
        ValueError: an archived goal, budget, batch size or seed out of range, an unknown agent kind, agent
            settings an agent refuses, duplicate agent names, a design space in which no
            point satisfies the restrictions, or (no LLM agent) one whose every valid point
            already has a candidate of the goal (an exhausted goal).
    """
    if goal.archived:
        raise ValueError(f"goal {goal.pk} ({goal.name}) is archived: unarchive it to start runs")
    if budget < 1:
        raise ValueError(f"budget must be at least 1 evaluation, got {budget}")
    if batch_size < 1:
        raise ValueError(f"batch size must be at least 1, got {batch_size}")
    if seed is not None and not 0 <= seed < 2**31:
        raise ValueError(f"seed must be in [0, 2**31), got {seed}")
    mix = list(agents or DEFAULT_MIX)
    for a in mix:
        if not (isinstance(a, dict) and isinstance(a.get("kind"), str) and isinstance(a.get("settings") or {}, dict)
                and isinstance(a.get("name") or a["kind"], str)):
            raise ValueError(f"an agent is {{'name': str, 'kind': str, 'settings': dict}}, not {a!r}")
        try:
            make_agent(a["kind"], 0, a.get("settings"))
        except KeyError as exc:
            raise ValueError(str(exc).strip("\"'")) from None
    names = [a.get("name") or a["kind"] for a in mix]
    if len(set(names)) != len(names):
        raise ValueError(f"agent names must be unique, got {names}")
    space = goal.design_space()
    if not any(a["kind"] == "llm" for a in mix):
        if not remaining.has_valid_point(space):
            raise ValueError("no point of the design space satisfies its restrictions: nothing to search")
        rows = history_rows(goal)
        if remaining.open_point(space, remaining.seen_keys(space, rows)) is None:
            raise ValueError(f"every valid point of goal {goal.pk}'s design space already has a candidate "
                             f"({len(rows)} in all): nothing left to search; widen the space or create a new goal")
    with transaction.atomic():
        run = Run.objects.create(
            goal=goal,
            budget=budget,
            batch_size=batch_size,
            seed=secrets.randbits(31) if seed is None else seed,
            created_by=user,
            max_wall_s=max_wall_s,
            space=goal.space,
            constraints=goal.constraints,
            warm_start=insight_store.warm_start(goal),
        )
        AgentRecord.objects.bulk_create(
            AgentRecord(run=run, name=name, kind=a["kind"], settings=a.get("settings") or {})
            for name, a in zip(names, mix)
        )
        baselines.ensure(goal)  # asked for once per key: the speedup every page shows
    events.publish(run.pk, "run", run_state(run))
    return run, _next_candidates(run.pk, 0)


def advance(run_id: int) -> list[Candidate]:
    """After an evaluation (or a cancel): close every generation whose candidates are all
    done, apply pending directions and propose into the run's free slots.

    Generations do not wait for their slowest candidate: a run keeps up to ``batch_size``
    candidates in flight (queued or running), and each slot an evaluation frees is proposed
    again at once, as a new (smaller) generation (a steady-state search). A generation is
    closed, and its agents credited, once none of its candidates is in flight.

    Returns the candidates to dispatch: empty while every slot is in flight, or when the run
    finished (budget or wall time spent and nothing in flight, space exhausted, stopped).
    Transactions stay short: agents propose and insights are learned outside any row lock.
    """
    with transaction.atomic():
        run = _locked_run(run_id)
        if run.state != Run.State.RUNNING:
            return []
        closed = _close_finished_generations(run)
        number = run.generation
    for gen in closed:
        _learn(run, gen)
    return _next_candidates(run_id, number)


def sweep() -> tuple[list[Candidate], list[Candidate]]:
    """Recover what a crash left behind.

    Returns:
        ``(to_dispatch, queued)``: candidates that certainly need a task (new generations of
        runs that were stuck with nothing pending, because a worker died between storing
        evidence and advancing; and ``running`` claims whose holder is dead or stale), and
        ``queued`` candidates whose task may or may not still be in the broker (dispatch them
        when their queue is empty: a restarted broker without persistence lost them). The
        conditional claim keeps a duplicate task harmless.
    """
    to_dispatch: list[Candidate] = []
    now = timezone.now()
    # A run at generation 0 younger than START_GRACE is being started: start_run proposes its
    # first generation itself (advancing it here would leave start_run with nothing to return).
    starting = Q(generation=0, started_at__gt=now - START_GRACE)
    for run in Run.objects.filter(state=Run.State.RUNNING).exclude(starting):
        try:
            to_dispatch += advance(run.pk)
        except Exception:  # noqa: BLE001 - one run's fault must not stop the others' recovery
            log.exception("sweep: run %s could not advance", run.pk)
    queued: list[Candidate] = []
    new_ids = {c.pk for c in to_dispatch}
    for c in Candidate.objects.filter(run__state=Run.State.RUNNING, status__in=PENDING_STATUSES).select_related("goal"):
        if c.pk in new_ids:
            continue
        if c.status == CandidateStatus.QUEUED:
            queued.append(c)
        elif holder_is_dead(c.claimed_by) or (c.claimed_at and c.claimed_at < now - stale_after()):
            to_dispatch.append(c)
    return to_dispatch, queued


def _next_candidates(run_id: int, after: int) -> list[Candidate]:
    """Propose generations after generation ``after`` until one has something to evaluate.

    A generation whose candidates all reuse earlier evidence needs no evaluation: it is closed
    at once and the next one proposed. Returns [] if another process advanced the run first.
    """
    for _ in range(MAX_REUSE_ROUNDS):
        try:
            new = propose_generation(run_id, after)
        except DatabaseError:
            raise  # the database may come back: the sweeper advances the run again
        except Exception as exc:  # noqa: BLE001 - anything else fails the run with the reason
            log.exception("run %s: generation %s could not be proposed", run_id, after + 1)
            end(run_id, after, Run.State.FAILED, Run.EndKind.FAILED,
                f"generation {after + 1} could not be proposed: {type(exc).__name__}: {exc}")
            return []
        if new is None:
            # Another process proposed meanwhile: slots may still be free (its count of the
            # candidates in flight came first), so propose again after its generation.
            current = Run.objects.filter(pk=run_id, state=Run.State.RUNNING).values_list("generation", flat=True).first()
            if current is None or current == after:
                return []
            after = current
            continue
        pending = [c for c in new if c.is_pending]
        if pending:
            return pending
        if not new:  # propose_generation ended the run (or it had ended)
            return []
        run = Run.objects.get(pk=run_id)
        with transaction.atomic():
            closed = _close_generation(_locked_run(run_id))
        if closed is not None:
            _learn(run, closed)
        after = run.generation
    return []


def propose_generation(run_id: int, after: int) -> list[Candidate] | None:
    """Apply pending directions, share the batch among agents, store their new candidates.

    Proposals whose content hash the goal already has are dropped: an identical kernel is never
    benchmarked twice. A proposal identical (hash, workload, target, shape set) to a candidate
    of another goal reuses that evidence.

    The generation has as many candidates as the run has free slots: ``batch_size`` minus
    its candidates in flight (queued or running). In the endgame of a run with one objective
    (the generations that start with at most ``SWARM_ENDGAME_SHARE`` of the budget left,
    :func:`swarm.learning.credit.endgame_evaluations`) the slots go to the agents that climb
    (:attr:`swarm.agents.Agent.climbs`), and their view says so (``RunView.endgame``); slots
    they cannot fill go to the others, as in any generation. Pending directions are applied
    first, at every call, even when no slot is free.

    Returns:
        The new candidates of generation ``after + 1``; [] when no slot is free, or when the
        run is over (budget or wall time spent, stopped, nothing left to propose: once nothing
        is in flight the run is ended with its reason, :func:`end`); None when the run is no
        longer at generation ``after`` (another process advanced it).
    """
    number = after + 1
    with transaction.atomic():
        run = _locked_run(run_id)
        if run.generation != after:
            return None
        applied = directions.apply_pending(run, number)
        in_flight = run.candidates.filter(status__in=PENDING_STATUSES).count()
    for d in applied:
        events.publish(run.pk, "direction", d.to_dict())
    if run.state != Run.State.RUNNING:
        return []
    elapsed = (timezone.now() - run.started_at).total_seconds()
    if run.max_wall_s is not None and elapsed >= run.max_wall_s:
        if not in_flight:  # else it ends when the last candidate in flight is done
            end(run_id, after, Run.State.FINISHED, Run.EndKind.WALL_TIME,
                f"wall time spent: {elapsed:.0f} s of {run.max_wall_s:g} s, after generation {after}")
        return []
    goal = run.goal
    rows = history_rows(goal)
    spent = sum(1 for r in rows if r.run_id == run.pk)
    if spent >= run.budget:
        if not in_flight:
            end(run_id, after, Run.State.FINISHED, Run.EndKind.BUDGET,
                f"budget spent: {spent} of {run.budget} evaluations")
        return []
    n = min(run.batch_size - in_flight, run.budget - spent)
    if n <= 0:
        return []  # every slot is in flight
    records = list(run.agents.all())
    arms = [Arm(r.name, r.evaluations, r.improvements, r.boost, r.paused, r.failed_proposals) for r in records]
    shares, scores = allocate(arms, n, exploration=float(getattr(settings, "SWARM_UCB_EXPLORATION", 0.3)))
    endgame = None
    # One objective only: a climb ranks by the primary one, and a Pareto front is not its best point.
    share = float(getattr(settings, "SWARM_ENDGAME_SHARE", DEFAULT_ENDGAME_SHARE))
    if len(goal.objectives) == 1 and run.budget - spent <= endgame_evaluations(run.budget, share):
        endgame = endgame_shares(arms, n, {r.name for r in records if climbs(r.kind)}, turn=number)
    shares = endgame or shares
    # Agents think outside any transaction: an LLM call or a model fit must not hold a lock.
    view = run_view(run, number, rows=rows, context=any(reads_context(r.kind) for r in records),
                    related=any(reads_related(r.kind) for r in records))
    view = replace(view, endgame=endgame is not None)
    fingerprint = backend_fingerprint(goal)
    seen = set(view.seen)
    proposed: list[tuple[AgentRecord, Proposal]] = []
    usage = dict(run.llm_usage)
    fell_short: set[str] = set()

    def ask(record: AgentRecord, k: int) -> int:
        """Ask ``record``'s agent for ``k`` proposals; returns how many are new, valid points."""
        try:
            agent = make_agent(record.kind, _agent_seed(run.seed, number, record.name), record.settings)
            proposals = agent.propose(_with_seen(view, seen), k)
        except Exception as exc:  # noqa: BLE001 - one agent's fault must not stop the run
            log.exception("run %s: agent %r failed to propose in generation %s", run.pk, record.name, number)
            agent, proposals = None, [Proposal(params={}, error=f"the agent failed: {type(exc).__name__}: {exc}")]
        usable = given = 0
        for proposal in proposals:
            if not proposal.error:
                if given >= k:
                    continue  # more than asked for: the run's budget is not the agent's to spend
                given += 1
            proposed.append((record, proposal))
            if proposal.error:
                continue
            if proposal.source is not None:
                usable += 1
            elif view.space.contains(proposal.params) and (key := view.space.point_key(proposal.params)) not in seen:
                seen.add(key)
                usable += 1
        if usable < k:
            fell_short.add(record.name)  # raised, failed (an unreachable LLM) or had nothing new
        for name, v in (agent.usage if agent is not None else {}).items():
            usage[name] = usage.get(name, 0) + v
        return usable

    lane_records = [r for r in records if llm_lane.in_lane(r.kind)]
    # The lane first, so that its new requests run while the other agents propose.
    short = _lane_proposals(run, lane_records, view, number, shares, usage, proposed) if lane_records else 0
    for record in records:
        if shares.get(record.name, 0) > 0 and record not in lane_records:
            got = ask(record, shares[record.name])
            short += shares[record.name] - got
            shares[record.name] = got  # what it filled
    # Slots an agent could not fill (it failed, or had nothing new) go to the agents that filled
    # theirs, best credit first, each asked once: a failing agent neither ends the run early nor
    # shrinks the generation while another agent still has something to propose, and one that
    # fell short is not asked again (an LLM call that failed is not repeated at once).
    for record in sorted(records, key=lambda r: -scores.get(r.name, 0.0)):
        if short <= 0:
            break
        if record.paused or record.boost <= 0 or record.name in fell_short or record in lane_records:
            continue
        got = ask(record, short)
        shares[record.name] = shares.get(record.name, 0) + got
        short -= got
    if lane_records and not in_flight and not _any_new(goal, proposed, fingerprint):
        _wait_for_lane(run, lane_records, view, number, n, usage, proposed, shares, goal, fingerprint)
    created: list[Candidate] = []
    with transaction.atomic():
        run = _locked_run(run_id, with_goal=False)
        if run.generation != after or run.state != Run.State.RUNNING:
            return None
        created = _store(run, goal, view, number, proposed, fingerprint)
        run.llm_usage = usage
        if created:
            run.generation = number
            for r in records:
                r.last_share, r.score = shares.get(r.name, 0), scores.get(r.name, 0.0)
            AgentRecord.objects.bulk_update(records, ["last_share", "score"])
            Generation.objects.create(run=run, number=number, shares=shares, credit=scores)
        run.save(update_fields=["generation", "llm_usage"])

    def publish() -> None:
        events.publish(run.pk, "candidates", {"items": [c.to_dict() for c in created]})
        events.publish(run.pk, "generation", {"number": number, "shares": shares, "scores": scores})

    if created and events.listening():
        transaction.on_commit(publish)
    if not created and not in_flight:  # with candidates in flight, their evidence may give the agents more
        state, kind, reason = _why_nothing_new(run, records, view.space, number)
        end(run_id, after, state, kind, reason)
    return created


def _why_nothing_new(run: Run, records: list[AgentRecord], space, number: int) -> tuple[str, str, str]:
    """``(state, end_kind, end_reason)`` of a run whose generation ``number`` got no new candidate."""
    active = [r for r in records if not r.paused and r.boost > 0]
    if not active:
        return Run.State.STOPPED, Run.EndKind.STOPPED, (
            f"every agent is paused or has boost 0 ({', '.join(r.name for r in records)}): nothing proposes")
    rows = history_rows(run.goal)
    if remaining.open_point(space, remaining.seen_keys(space, rows)) is None:
        return Run.State.FINISHED, Run.EndKind.SPACE_EXHAUSTED, (
            f"space exhausted: every valid point of the run's space has a candidate "
            f"({sum(1 for r in rows if r.run_id == run.pk)} in this run, {len(rows)} for the goal)")
    errors = list(dict.fromkeys(
        f"{agent}: {error}" for agent, error in
        ProposalFailure.objects.filter(run_id=run.pk, generation=number).values_list("agent", "error")[:20]))
    why = "; ".join(errors[:3]) if errors else "they proposed only points that already have candidates"
    return Run.State.FAILED, Run.EndKind.FAILED, (
        f"no agent proposed a new candidate in generation {number}: {why}"[:2000])


def _lane_proposals(run: Run, lane_records: list[AgentRecord], view: RunView, number: int, shares: dict[str, int],
                    usage: dict[str, Any], proposed: list[tuple[AgentRecord, Proposal]]) -> int:
    """Take the lane's finished answers into this generation and start its next requests
    (:func:`swarm.runs.llm_lane.step`). At least one finished answer a generation gets a slot,
    taken from the other agents' shares; the others wait for the next generation. Returns the lane's slots left unfilled (for the other agents);
    ``shares`` becomes what each agent has to fill."""
    caps = {r.name: max(shares.get(r.name, 0), 1) for r in lane_records}
    taken = llm_lane.step(run, lane_records, view, number, caps, usage, worker_identity())
    proposed.extend(taken)
    short = extra = 0
    for r in lane_records:
        got = sum(1 for rec, p in taken if rec is r and not p.error)
        short += max(shares.get(r.name, 0) - got, 0)
        extra += max(got - shares.get(r.name, 0), 0)
        shares[r.name] = got
    lane_names = {r.name for r in lane_records}
    while extra > 0:  # answers beyond the lane's share displace the largest other shares
        others = [k for k, v in shares.items() if k not in lane_names and v > 0]
        if not others:
            break
        shares[max(others, key=lambda k: shares[k])] -= 1
        extra -= 1
    return short


#: Rounds a generation with nothing else to evaluate waits for the lane (each up to the
#: longest request deadline of its agents).
LANE_WAIT_ROUNDS = 3


def _any_new(goal: Goal, proposed: list[tuple[AgentRecord, Proposal]], fingerprint: dict[str, Any]) -> bool:
    """Whether a proposal would become a candidate: a parameter point (already checked unseen)
    or a kernel whose content hash the goal does not have."""
    digests = set()
    for _, p in proposed:
        if p.error:
            continue
        if p.source is None:
            return True
        digests.add(kernels.candidate_hash(p.source, p.params, fingerprint))
    return bool(digests - set(Candidate.objects.filter(goal=goal, content_hash__in=digests)
                              .values_list("content_hash", flat=True)))


def _wait_for_lane(run: Run, lane_records: list[AgentRecord], view: RunView, number: int, n: int,
                   usage: dict[str, Any], proposed: list[tuple[AgentRecord, Proposal]], shares: dict[str, int],
                   goal: Goal, fingerprint: dict[str, Any]) -> None:
    """No agent proposed anything new: wait for the lane's running requests and take their
    answers (up to ``n``), so that a lane-only run does not end while its requests run."""
    deadline = llm_lane.request_deadline_s(lane_records)
    for _ in range(LANE_WAIT_ROUNDS):
        if llm_lane.running(run):
            llm_lane.wait(run, deadline)
        # An answer may have finished since the lane's step of this generation (a fast
        # endpoint): take it whether or not another request still runs.
        taken = llm_lane.step(run, lane_records, view, number, {r.name: n for r in lane_records}, usage,
                              worker_identity())
        proposed.extend(taken)
        for rec, p in taken:
            if not p.error:
                shares[rec.name] = shares.get(rec.name, 0) + 1
        if _any_new(goal, proposed, fingerprint) or (not taken and not llm_lane.running(run)):
            break


def _store(run: Run, goal: Goal, view: RunView, number: int, proposed: list[tuple[AgentRecord, Proposal]],
           fingerprint: dict[str, Any]) -> list[Candidate]:
    """Turn a generation's proposals into candidates with a handful of bulk queries.

    Failed or out-of-space proposals are recorded as :class:`ProposalFailure`; duplicates
    (same point, or same content hash as a candidate of the goal) are dropped; a proposal whose
    twin (same hash, workload, target, shape set) has evidence reuses it.
    """
    failures: list[ProposalFailure] = []
    failed_by_agent: dict[int, int] = {}
    seen = set(view.seen)
    accepted: list[tuple[AgentRecord, Proposal, str, str]] = []  # record, proposal, source, digest
    digests: set[str] = set()
    for record, proposal in proposed:
        error = proposal.error
        if not error and proposal.source is None:
            if not view.space.contains(proposal.params):
                error = f"proposal {proposal.params} is outside the run's design space"
            else:
                key = view.space.point_key(proposal.params)
                if key in seen:
                    continue
                seen.add(key)
        if error:
            failures.append(ProposalFailure(run=run, agent=record.name, generation=number, error=error, raw=proposal.raw))
            failed_by_agent[record.pk] = failed_by_agent.get(record.pk, 0) + 1
            continue
        source = proposal.source if proposal.source is not None else goal.source
        digest = kernels.candidate_hash(source, proposal.params, fingerprint)
        if digest in digests:
            continue
        digests.add(digest)
        accepted.append((record, proposal, source, digest))
    ProposalFailure.objects.bulk_create(failures)
    for pk, n in failed_by_agent.items():
        AgentRecord.objects.filter(pk=pk).update(failed_proposals=F("failed_proposals") + n)
    # One query for both: the goal's own candidates with these hashes (dropped) and other
    # goals' evaluated twins (reused; not an unjudged one: its workload's inputs may be fixed since).
    matches = list(Candidate.objects.filter(
        Q(goal=goal) | (Q(goal__workload=goal.workload, goal__target=goal.target, goal__shape_set=goal.shape_set,
                          evidence__isnull=False) & ~Q(status__in=UNJUDGED_STATUSES)),
        content_hash__in=digests,
    ).select_related("evidence").defer("source", "rationale").order_by("id")) if digests else []
    existing = {t.content_hash for t in matches if t.goal_id == goal.pk}
    twins: dict[str, Candidate] = {}
    for t in matches:
        if t.goal_id != goal.pk and t.content_hash not in existing:
            twins.setdefault(t.content_hash, t)
    now = timezone.now()
    rows = []
    for record, proposal, source, digest in accepted:
        if digest in existing:
            continue
        twin = twins.get(digest)
        rows.append((proposal, Candidate(
            goal=goal, run=run, generation=number, agent=record.name, content_hash=digest,
            params=proposal.params, source=source, rationale=proposal.rationale, transcript=proposal.transcript,
            status=twin.status if twin else CandidateStatus.QUEUED, reused_from=twin,
            evaluated_at=now if twin else None,
        )))
    created = Candidate.objects.bulk_create([c for _, c in rows])
    for c in created:
        if c.reused_from is None:  # no evidence yet: to_dict() must not query for it
            Candidate.evidence.related.set_cached_value(c, None)
    if any(p.parents for p, _ in rows):
        parent_ids = set(Candidate.objects.filter(goal=goal, pk__in={i for p, _ in rows for i in p.parents}).values_list("pk", flat=True))
        Candidate.parents.through.objects.bulk_create(
            Candidate.parents.through(from_candidate_id=c.pk, to_candidate_id=i)
            for p, c in rows for i in p.parents if i in parent_ids
        )
    Evidence.objects.bulk_create(
        Evidence(
            candidate=c, status=t.evidence.status, metrics=t.evidence.metrics, samples_ms=t.evidence.samples_ms,
            cases=t.evidence.cases, static=t.evidence.static, fingerprint=t.evidence.fingerprint, duration_s=0.0,
            log=f"evidence reused from candidate {t.pk} (identical kernel)\n{t.evidence.log}",
        )
        for c in created if (t := c.reused_from) is not None
    )
    return created


def _agent_seed(run_seed: int, generation: int, name: str) -> int:
    return (run_seed * 1_000_003 + generation * 7919 + zlib.crc32(name.encode())) % 2**63


def _with_seen(view: RunView, seen: set[str]) -> RunView:
    return replace(view, seen=frozenset(seen))


def _locked_run(run_id: int, *, with_goal: bool = True) -> Run:
    """The run, locked for this transaction, with its goal (whose row is not locked)."""
    runs = Run.objects.select_for_update(of=("self",))
    return (runs.select_related("goal") if with_goal else runs).get(pk=run_id)


def _close_finished_generations(run: Run) -> list[Generation]:
    """Close (:func:`_close_generation`) every open generation of ``run`` none of whose
    candidates is in flight, oldest first (inside the caller's transaction)."""
    open_numbers = list(Generation.objects.filter(run=run, finished_at__isnull=True)
                        .order_by("number").values_list("number", flat=True))
    if not open_numbers:
        return []
    busy = set(run.candidates.filter(status__in=PENDING_STATUSES, generation__in=open_numbers)
               .values_list("generation", flat=True).distinct())
    closed = [_close_generation(run, number) for number in open_numbers if number not in busy]
    return [g for g in closed if g is not None]


def _close_generation(run: Run, number: int | None = None) -> Generation | None:
    """Credit agents for frontier improvements of the run's generation ``number`` (default
    its latest) and mark it finished (inside the caller's transaction). A point whose
    ``latency_ms`` is within the target's noise floor (:func:`swarm.runs.noise_floors.floor_for`)
    of a frontier point that is no worse elsewhere is not an improvement; the frontier it is
    measured against is that of the earlier generations' evaluated candidates. Returns the
    generation, or None if it was already closed."""
    number = run.generation if number is None else number
    gen = Generation.objects.filter(run=run, number=number, finished_at__isnull=True).first()
    if gen is None:
        return None
    goal = run.goal
    signs = [1.0 if o["direction"] == "minimize" else -1.0 for o in goal.objectives]

    def vector(metrics: dict) -> list[float] | None:
        try:
            return [s * float(metrics[o["metric"]]) for s, o in zip(signs, goal.objectives)]
        except (KeyError, TypeError, ValueError):
            return None

    rows = sorted(
        (r for r in history_rows(goal) if r.run_id == run.pk and r.status not in PENDING_STATUSES),
        key=lambda r: (r.evaluated_at is None, r.evaluated_at or _EPOCH, r.id),  # nulls last, as SQL sorts
    )
    before, new, evaluated = [], [], {}
    for r in rows:
        metrics = r.metrics or {}
        v = vector(metrics) if r.status == "ok" and run.is_feasible(metrics) else None
        if r.generation < gen.number:
            if v is not None:
                before.append(v)
        elif r.generation == gen.number and r.status not in UNJUDGED_STATUSES:  # an unjudged one is no pull
            evaluated[r.agent] = evaluated.get(r.agent, 0) + 1
            if v is not None:
                new.append((r.agent, v))
    # A latency "gain" the target cannot resolve is no improvement: within the noise floor of
    # the frontier point it would beat, it is credited to nobody.
    floor = floor_for(goal.target, goal.workload, goal.shape_set).floor
    tolerance = [floor if o["metric"] == "latency_ms" and o["direction"] == "minimize" else 0.0 for o in goal.objectives]
    improvements = frontier_improvements(before, new, tolerance)
    credited = set(evaluated) | set(improvements)
    if credited:  # one UPDATE for every credited agent

        def per_agent(counts: dict[str, int]) -> Case:
            return Case(*(When(name=a, then=Value(counts[a])) for a in counts), default=Value(0))

        AgentRecord.objects.filter(run=run, name__in=credited).update(
            evaluations=F("evaluations") + per_agent(evaluated),
            improvements=F("improvements") + per_agent(improvements),
        )
    gen.improvements = improvements
    gen.finished_at = timezone.now()
    gen.save(update_fields=["improvements", "finished_at"])
    return gen


def _learn(run: Run, gen: Generation) -> None:
    """Update insights after a generation closed, when due (:func:`swarm.learning.store.due`;
    always once the run has proposed its whole budget), and publish it (outside any transaction).

    Learning is best effort: its failure is logged and the run goes on (proposing the next
    generation decides whether the run can)."""
    try:
        final = Candidate.objects.filter(run=run).count() >= run.budget  # nothing more will be proposed
        new_insights = (insight_store.update_insights(run, gen.number)
                        if insight_store.due(run, gen.number, final=final) else [])
    except DatabaseError:
        raise
    except Exception:  # noqa: BLE001 - insights are advice; a run does not end for want of them
        log.exception("run %s: insights after generation %s could not be learned", run.pk, gen.number)
        new_insights = []
    if not events.listening():
        return
    leaderboard = [a.to_dict() for a in run.agents.all()]
    events.publish(run.pk, "generation_finished", {"number": gen.number, "improvements": gen.improvements, "agents": leaderboard})
    for i in new_insights:
        events.publish(run.pk, "insight", i.to_dict())


def stop_run(run: Run, user=None, *, via: str = "") -> None:
    """Stop a run now: queued candidates are cancelled; a running evaluation finishes and is kept.

    The end reason names the user and ``via`` (e.g. ``"the run page"``, ``"the API"``).
    """
    who = user.get_username() if user is not None and user.is_authenticated else "an unknown user"
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run.pk)
        if run.state != Run.State.RUNNING:
            return
        run.candidates.filter(status=CandidateStatus.QUEUED).delete()
        finish(run, Run.State.STOPPED, Run.EndKind.STOPPED,
               f"stopped by {who}" + (f" through {via}" if via else "") + f" in generation {run.generation}")
        AuditEvent.objects.create(actor=user, verb="run.stop", subject=f"run {run.pk}")


def end(run_id: int, after: int, state: str, kind: str, reason: str) -> bool:
    """End the run with ``reason`` if it is still running at generation ``after`` (another
    process may have advanced or ended it meanwhile). Returns whether this call ended it."""
    with transaction.atomic():
        run = _locked_run(run_id, with_goal=False)
        if run.state != Run.State.RUNNING or run.generation != after:
            return False
        finish(run, state, kind, reason)
    return True


# --- evaluating one candidate -----------------------------------------------------------------


def evaluate_candidate(candidate_id: int, *, evaluate: EvaluateFn | None = None) -> Candidate | None:
    """Claim, evaluate in the sandbox, store evidence in one transaction and publish it.

    Args:
        candidate_id: primary key of a ``queued`` candidate.
        evaluate: the evaluator (default ``kernels.evaluate``), injectable for tests.

    Returns:
        The evaluated candidate, or None if it was not claimable (already evaluated, being
        evaluated by another live worker, or deleted by a stop).
    """
    done = evaluate_batch([candidate_id], evaluate=evaluate)
    return done[0] if done else None


def evaluate_batch(candidate_ids: list[int], *, evaluate: EvaluateFn | None = None) -> list[Candidate]:
    """Claim and evaluate several candidates one after the other, then store all their
    evidence in one transaction and publish one event per run.

    Evaluations stay sequential (timings must not overlap); only the writes and the events
    are batched, which is what makes cheap evaluations (replay) fast.

    Returns:
        The candidates this call evaluated and stored, in the given order.
    """
    claimed = claim_many(candidate_ids)
    if not claimed:
        return []
    rows = Candidate.objects.select_related("goal", "run").in_bulk(claimed)
    _publish_running([rows[pk] for pk in claimed if pk in rows])
    records = {pk: _evaluate(rows[pk], evaluate or evaluator_for(rows[pk].goal)) for pk in claimed if pk in rows}
    me, now = worker_identity(), timezone.now()
    with transaction.atomic():
        # A claim taken over meanwhile (we were presumed dead) belongs to the new holder; a
        # candidate cancelled while it ran is still ours to store (its evidence says how far it got).
        owned = set(
            Candidate.objects.select_for_update()
            .filter(pk__in=list(records), status__in=(CandidateStatus.RUNNING, CandidateStatus.CANCELLED),
                    claimed_by=me)
            .values_list("pk", flat=True)
        ) - set(Evidence.objects.filter(candidate_id__in=list(records)).values_list("candidate_id", flat=True))
        done = [rows[pk] for pk in sorted(owned)]
        stored = Evidence.objects.bulk_create(_evidence(c, records[c.pk]) for c in done)
        by_status: dict[str, list[int]] = {}
        for ev in stored:  # the in-memory candidates now match their rows (no re-read)
            ev.candidate.status, ev.candidate.evaluated_at = ev.status, now
            by_status.setdefault(ev.status, []).append(ev.candidate_id)
        for status, pks in by_status.items():
            Candidate.objects.filter(pk__in=pks).update(status=status, evaluated_at=now)
    if not events.listening():
        return done
    by_run: dict[int, list[dict]] = {}
    for c in done:
        by_run.setdefault(c.run_id, []).append(c.to_dict())
    for run_id, items in by_run.items():
        if len(items) == 1:
            events.publish(run_id, "candidate", items[0])
        else:
            events.publish(run_id, "candidates", {"items": items})
    return done


def _publish_running(candidates: list[Candidate]) -> None:
    """A ``candidate`` event (status ``running``, ``started_at``) for each claimed candidate of
    a measured target, so the run page shows it running; none for batched (replay) ones,
    which take microseconds."""
    if not events.listening():
        return
    for c in candidates:
        if not c.goal.capabilities.batchable:
            Candidate.evidence.related.set_cached_value(c, None)  # not evaluated yet: no query for it
            events.publish(c.run_id, "candidate", c.to_dict())


def _evidence(candidate: Candidate, r: dict[str, Any]) -> Evidence:
    """The evidence row of ``candidate`` from an evaluator's ``Evidence.to_dict()``."""
    return Evidence(
        candidate=candidate,
        status=str(r["status"]),
        metrics=r.get("metrics") or {},
        samples_ms=r.get("samples_ms") or {},
        cases=r.get("cases") or [],
        log=r.get("log") or "",
        fingerprint=r.get("fingerprint") or {},
        static=r.get("static") or {},
        duration_s=r.get("duration_s") or 0.0,
    )


def _engine_evaluator() -> EvaluateFn:
    """The evaluator of engine goals (their candidates are plans, not kernels: no pruning)."""
    from swarm.engine_registry.goals import evaluate_plan

    return evaluate_plan


def evaluator_for(goal: Goal) -> EvaluateFn:
    """``swarm.engine_registry.goals.evaluate_plan`` for engine goals (candidates are engine plans), else
    ``kernels.evaluate``; both take the same arguments and return evidence."""
    from swarm.engine_registry.goals import evaluate_plan, is_engine_workload

    return evaluate_plan if is_engine_workload(goal.workload) else kernels.evaluate


def _evaluate(candidate: Candidate, evaluate: EvaluateFn) -> dict[str, Any]:
    """Evidence of one candidate as a dict; an evaluator crash becomes ``runtime_error``.

    A measured (not recorded) kernel goal's evaluation gets the run's prune limits
    (:func:`swarm.runs.pruning.prune_for`: ``pruned`` once its first calls show it more than the goal's
    ``prune_factor`` times slower than the incumbent) and stops when the candidate is cancelled.
    """
    goal = candidate.goal
    kwargs: dict[str, Any] = dict(shape_set=goal.shape_set, backend=goal.backend, timeout_s=settings.EVAL_TIMEOUT_S)
    if goal.capabilities.recorded:
        goal.ensure_dataset()
    elif evaluate is not _engine_evaluator():
        kwargs.update(prune=pruning.prune_for(candidate.run), cancelled=pruning.CancelCheck(candidate.pk))
    if goal.capabilities.needs_target:
        kwargs["target"] = goal.target
    try:
        return evaluate(goal.workload, candidate.source, candidate.params, **kwargs).to_dict()
    except Exception as exc:  # noqa: BLE001 - the evaluator's own failure must not lose the candidate
        log.exception("evaluator failed on candidate %s", candidate.pk)
        return {"status": CandidateStatus.RUNTIME_ERROR, "metrics": {}, "log": f"evaluator error: {type(exc).__name__}: {exc}"}




