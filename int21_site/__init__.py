"""Django project of the Kernel Factory: settings, URLs, ASGI entry point and Celery app."""

from int21_site.celery_app import app as celery_app

__all__ = ["celery_app"]
