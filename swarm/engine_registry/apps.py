from django.apps import AppConfig


class EngineRegistryConfig(AppConfig):
    """The production engines app. Its label stays ``engines_web``: the label names the
    migrations, the tables (``engines_web_productionengine``, ...) and foreign keys to them."""

    name = "swarm.engine_registry"
    label = "engines_web"
    verbose_name = "Inference engines"
    default_auto_field = "django.db.models.BigAutoField"
