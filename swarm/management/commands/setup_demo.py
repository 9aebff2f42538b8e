"""``manage.py setup_demo``: the demo user (engineer + approver), the demo rmsnorm goal, and the
demo's production engines with a plan tuning of each queued (the worker runs it)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.core.management.base import BaseCommand
from django.db.models import Q

from swarm.goals.lifecycle import default_goal

ROLES = {
    # role -> permission codenames of the swarm app, or "app_label.codename" of another app
    "viewer": [],
    "engineer": ["add_goal", "change_goal", "add_run", "change_run",
                 "engines_web.add_productionengine", "engines_web.add_enginebenchmark"],
    "approver": ["approve_promotion"],
}


def ensure_roles() -> dict[str, Group]:
    """Create the viewer/engineer/approver groups with their permissions (idempotent)."""
    groups = {}
    for role, codenames in ROLES.items():
        group, _ = Group.objects.get_or_create(name=role)
        q = Q(pk__in=[])
        for name in codenames:
            app, _, code = name.rpartition(".")
            q |= Q(content_type__app_label=app or "swarm", codename=code)
        group.permissions.set(Permission.objects.filter(q))
        groups[role] = group
    return groups


class Command(BaseCommand):
    help = ("Create the roles, a demo user, the demo goal (rmsnorm, hidden 4096, cpu-x86_64) and the demo "
            "engines, with a plan tuning of each queued.")

    def add_arguments(self, parser) -> None:
        parser.add_argument("--username", default="demo")
        parser.add_argument("--password", default="demo")
        parser.add_argument("--no-engines", action="store_true", help="register no engines (no plan tunings)")

    def handle(self, *args, **opts) -> None:
        groups = ensure_roles()
        User = get_user_model()
        user, created = User.objects.get_or_create(username=opts["username"])
        if created:
            user.set_password(opts["password"])
            user.save()
        user.groups.add(groups["engineer"], groups["approver"])
        goal = default_goal(
            "rmsnorm", "cpu-x86_64", "llama3-8b", user=user,
            name="Demo: RMSNorm hidden 4096 (Llama-3-8B) on cpu-x86_64, minimise latency",
        )
        self.stdout.write(f"demo user {user.username!r} ready; demo goal {goal.pk}: {goal.name}")
        if opts["no_engines"]:
            return
        from swarm.engine_registry.tuning import register_demo_engines  # noqa: PLC0415

        engines = register_demo_engines(user)
        self.stdout.write("engines registered: " + ", ".join(e.name for e in engines)
                          + " (their plans are tuned in the background: see /engines/)")
