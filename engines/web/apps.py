from django.apps import AppConfig


class EnginesWebConfig(AppConfig):
    name = "engines.web"
    label = "engines_web"
    verbose_name = "Inference engines"
    default_auto_field = "django.db.models.BigAutoField"
