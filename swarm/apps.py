import shutil

from django.apps import AppConfig
from django.conf import settings
from django.core import checks


class SwarmConfig(AppConfig):
    name = "swarm"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from swarm.checks import check_broker_visibility  # imports models: only once apps are ready

        checks.register(check_toolchain)
        checks.register(check_broker_visibility)


def check_toolchain(app_configs, **kwargs):
    """System checks for what evaluation needs on this host (ids ``swarm.W00x``)."""
    import os

    problems = []
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        problems.append(
            checks.Warning(
                f"C compiler {cc!r} not found: cpu-x86_64 candidates will fail to compile.",
                hint="Install gcc (Debian: apt-get install gcc) or set CC.",
                id="swarm.W001",
            )
        )
    if settings.EMBEDDED and settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):
        problems.append(
            checks.Warning(
                "PostgreSQL without REDIS_URL: workers in other processes cannot receive work "
                "over the memory:// broker.",
                hint="Set REDIS_URL, or run the embedded server (manage.py serve).",
                id="swarm.W002",
            )
        )
    return problems
