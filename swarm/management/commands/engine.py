"""``manage.py engine``: serve, validate, benchmark and register inference engines.

    manage.py engine serve --engine minilm --port 8100 [--host 127.0.0.1] [--plan JSON]
    manage.py engine validate --engine NAME [--config SIZE] [--json]
    manage.py engine register --engine NAME [--config SIZE] [--target T] [--plan JSON] [--name NAME] [--tune]
    manage.py engine tune NAME [--template-points N] [--plan-variants N]   (tune its plan in this process)
    manage.py engine bench --record NAME [--reps N]      (store a validation + benchmark in the history)
    manage.py engine guard --candidate ID [--json]       (run the promotion guard for a candidate)

Engines run with the production kernels of the database (``swarm.Promotion``): the
management command is the Django-side entry point; ``python -m engines`` is the
framework-free one.
"""

from __future__ import annotations

import json
import os

from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Inference engines: serve the MiniLM encoder (OpenAI-compatible /v1/embeddings), validate, benchmark, register."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        s = sub.add_parser("serve", help="serve the encoder behind /v1/embeddings")
        s.add_argument("--engine", default="minilm", choices=["minilm"])
        s.add_argument("--host", default="127.0.0.1")
        s.add_argument("--port", type=int, default=8100)
        s.add_argument("--plan", default="{}")
        s.add_argument("--max-batch", type=int, default=64, help="inputs per engine pass")
        s.add_argument("--max-batch-tokens", type=int, default=1024, help="tokens per engine pass")
        s.add_argument("--request-timeout-s", type=float, default=120.0, help="each request's deadline (s)")
        v = sub.add_parser("validate", help="end-to-end validation with the production kernels")
        v.add_argument("--engine", required=True)
        v.add_argument("--config")
        v.add_argument("--plan", default="{}")
        v.add_argument("--json", action="store_true")
        r = sub.add_parser("register", help="make an engine a production engine (guarded by kernel promotions)")
        r.add_argument("--engine", required=True)
        r.add_argument("--config", default="")
        r.add_argument("--target", default="cpu-x86_64")
        r.add_argument("--plan", default="{}")
        r.add_argument("--name")
        r.add_argument("--tune", action="store_true", help="queue a plan tuning of the engine on its target's worker")
        t = sub.add_parser("tune", help="tune a production engine's plan now, in this process (one line per step)")
        t.add_argument("name", metavar="NAME", help="production engine name, e.g. kda-layer-small/cpu-x86_64")
        t.add_argument("--template-points", type=int, default=3)
        t.add_argument("--plan-variants", type=int, default=6)
        b = sub.add_parser("bench", help="validate + benchmark a production engine and record it in its history")
        b.add_argument("--record", required=True, metavar="NAME", help="production engine name, e.g. minilm/cpu-x86_64")
        b.add_argument("--reps", type=int, default=7)
        g = sub.add_parser("guard", help="run the engine guard for a candidate kernel")
        g.add_argument("--candidate", type=int, required=True)
        g.add_argument("--json", action="store_true")

    def handle(self, *args, **opts):
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        try:
            plan = json.loads(opts.get("plan") or "{}")
        except ValueError as exc:
            raise CommandError(f"--plan is not JSON: {exc}") from None
        action = opts["action"]
        if action == "serve":
            return self._serve(opts, plan)
        if action == "validate":
            from engines._validate import validate  # noqa: PLC0415
            from swarm.engine_registry.registry import DbRegistry  # noqa: PLC0415

            try:
                res = validate(opts["engine"], config=opts.get("config"), plan=plan, registry=DbRegistry())
            except (KeyError, ValueError) as exc:
                raise CommandError(str(exc).strip("\"'")) from None
            self.stdout.write(json.dumps(res, default=str) if opts["json"] else f"{res['engine']}: {res['status']}")
            if res["status"] != "ok":
                raise CommandError("validation failed")
            return None
        if action == "register":
            return self._register(opts, plan)
        if action == "bench":
            from swarm.engine_registry.models import ProductionEngine  # noqa: PLC0415
            from swarm.engine_registry.services import record_benchmark  # noqa: PLC0415

            try:
                pe = ProductionEngine.objects.get(name=opts["record"])
            except ProductionEngine.DoesNotExist:
                raise CommandError(f"no production engine {opts['record']!r} (manage.py engine register first)") from None
            b = record_benchmark(pe, reps=opts["reps"])
            self.stdout.write(json.dumps({"benchmark": b.pk, "status": b.status, "metrics": b.metrics}, default=str))
            return None
        if action == "tune":
            return self._tune(opts)
        if action == "guard":
            from swarm.engine_registry.guard import check_kernel_promotion  # noqa: PLC0415
            from swarm.models import Candidate  # noqa: PLC0415

            try:
                cand = Candidate.objects.select_related("goal").get(pk=opts["candidate"])
            except Candidate.DoesNotExist:
                raise CommandError(f"no candidate {opts['candidate']}") from None
            res = check_kernel_promotion(cand)
            self.stdout.write(json.dumps({"ok": res.ok, "reason": res.reason, "check": res.check.pk}) if opts["json"]
                              else ("passed: " if res.ok else "BLOCKED: ") + res.reason)
            return None
        raise CommandError(f"unknown action {action}")

    def _serve(self, opts, plan):
        from engines.minilm import MiniLM  # noqa: PLC0415
        from engines.serve import Limits, make_app, serve  # noqa: PLC0415
        from swarm.engine_registry.registry import DbRegistry  # noqa: PLC0415

        try:
            app = make_app(MiniLM(registry=DbRegistry()), plan, Limits(max_batch=opts["max_batch"],
                                                                        max_batch_tokens=opts["max_batch_tokens"],
                                                                        request_timeout_s=opts["request_timeout_s"]))
        except (ValueError, ImportError) as exc:  # ImportError: the engines extra is not installed
            raise CommandError(str(exc)) from None
        self.stdout.write(f"serving all-MiniLM-L6-v2 on http://{opts['host']}:{opts['port']}/v1/embeddings")
        self.stdout.flush()
        serve(app, opts["host"], opts["port"])

    def _register(self, opts, plan):
        from swarm.engine_registry.services import register_engine  # noqa: PLC0415

        try:
            pe, created = register_engine(opts["engine"], config=opts["config"], target=opts["target"], plan=plan,
                                          name=opts.get("name"))
        except (KeyError, ValueError) as exc:
            raise CommandError(str(exc).strip("\"'")) from None
        self.stdout.write(f"{'registered' if created else 'updated'} production engine {pe.name} (id {pe.pk})")
        if opts.get("tune"):
            from swarm.engine_registry.tuning import start_tuning  # noqa: PLC0415

            t = start_tuning(pe)
            self.stdout.write(f"plan tuning {t.pk} queued (the engines page shows its progress)")

    def _tune(self, opts):
        from swarm.engine_registry.models import ProductionEngine  # noqa: PLC0415
        from swarm.engine_registry.tuning import run_step, start_tuning  # noqa: PLC0415

        try:
            pe = ProductionEngine.objects.get(name=opts["name"])
            tuning = start_tuning(pe, dispatch_now=False, template_points=opts["template_points"],
                                  plan_variants=opts["plan_variants"])
        except ProductionEngine.DoesNotExist:
            raise CommandError(f"no production engine {opts['name']!r} (manage.py engine register first)") from None
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        while tuning.status not in ("done", "failed"):
            tuning = run_step(tuning.pk, chain=False) or tuning.__class__.objects.get(pk=tuning.pk)
            done, total = tuning.progress
            self.stdout.write(f"step {done}/{total or '?'}: {tuning.state.get('phase')}")
        if tuning.status == "failed":
            raise CommandError(f"tuning {tuning.pk} failed: {tuning.error.splitlines()[0]}")
        pe.refresh_from_db()
        for row in pe.kernel_rows():
            self.stdout.write(f"{row['workload']:<18} {row['kind']:<10} {row['why']}")
