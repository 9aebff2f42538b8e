from django.contrib import admin

from swarm.engine_registry.models import EngineBenchmark, GuardCheck, ProductionEngine


@admin.register(ProductionEngine)
class ProductionEngineAdmin(admin.ModelAdmin):
    list_display = ("name", "engine", "config", "target", "active", "updated_at")


@admin.register(EngineBenchmark)
class EngineBenchmarkAdmin(admin.ModelAdmin):
    list_display = ("engine", "trigger", "label", "status", "created_at")


@admin.register(GuardCheck)
class GuardCheckAdmin(admin.ModelAdmin):
    list_display = ("candidate", "workload", "target", "ok", "overridden_at", "created_at")
