"""Shared fixtures: personas, a small goal, and markers for services, browser and GPU."""

from __future__ import annotations

import os
import shutil

import pytest
from django.conf import settings as django_settings

SERVICES = bool(os.environ.get("REDIS_URL")) and os.environ.get("DATABASE_URL", "").startswith("postgres")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Servers and workers started by tests promote with one approver too (see one_approver_promotes).
os.environ["PROMOTION_FOUR_EYES"] = "0"


def pytest_collection_modifyitems(config, items):
    skip_services = pytest.mark.skip(reason="needs DATABASE_URL (PostgreSQL) and REDIS_URL: run via .ci/run")
    skip_browser = pytest.mark.skip(reason="Debian's chromium is not installed (apt-get install chromium)")
    for item in items:
        if "services" in item.keywords and not SERVICES:
            item.add_marker(skip_services)
        if "browser" in item.keywords and not CHROMIUM:
            item.add_marker(skip_browser)


@pytest.fixture(scope="session", autouse=True)
def private_kernel_data(tmp_path_factory):
    """Keep the growing validation set of test evaluations out of the user's data directory
    (servers and workers started by tests inherit the environment)."""
    if "KERNELS_DATA_DIR" not in os.environ:
        os.environ["KERNELS_DATA_DIR"] = str(tmp_path_factory.mktemp("kernels-data"))
    yield


@pytest.fixture(autouse=True)
def one_approver_promotes(monkeypatch):
    """Tests promote with one approver in both modes (production mode turns four eyes on by
    default); the four-eyes tests turn it back on, and servers started by tests inherit the
    environment variable set below. (Not pytest-django's ``settings`` fixture: some tests take a
    parameter of that name.)"""
    monkeypatch.setattr(django_settings, "PROMOTION_FOUR_EYES", False)


@pytest.fixture
def roles(db):
    from swarm.management.commands.setup_demo import ensure_roles

    return ensure_roles()


@pytest.fixture
def owner(roles, django_user_model):
    """An engineer who may also approve promotions."""
    user = django_user_model.objects.create_user("owner", password="pw-owner")
    user.groups.add(roles["engineer"], roles["approver"])
    return user


@pytest.fixture
def outsider(roles, django_user_model):
    """A viewer: may read, may not create goals or promote."""
    user = django_user_model.objects.create_user("outsider", password="pw-outsider")
    user.groups.add(roles["viewer"])
    return user


@pytest.fixture
def small_goal(db, owner):
    """The default rmsnorm goal on the small test shapes (fast to evaluate)."""
    from swarm.goals.lifecycle import default_goal

    return default_goal("rmsnorm", "cpu-x86_64", "test-small", user=owner, name="rmsnorm small")
