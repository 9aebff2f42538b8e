from django.contrib import admin

from swarm.models import (
    AgentRecord,
    AuditEvent,
    Candidate,
    Direction,
    Evidence,
    Generation,
    Goal,
    Insight,
    Promotion,
    ProposalFailure,
    Run,
)


@admin.register(Goal)
class GoalAdmin(admin.ModelAdmin):
    list_display = ["name", "workload", "target", "shape_set", "created_at"]
    list_filter = ["workload", "target"]
    search_fields = ["name"]


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ["id", "goal", "state", "budget", "generation", "started_at"]
    list_filter = ["state"]


@admin.register(Candidate)
class CandidateAdmin(admin.ModelAdmin):
    list_display = ["id", "run", "generation", "agent", "status", "attempts"]
    list_filter = ["status", "agent"]
    raw_id_fields = ["goal", "run", "parents", "reused_from"]


@admin.register(Evidence)
class EvidenceAdmin(admin.ModelAdmin):
    list_display = ["candidate", "status", "duration_s", "created_at"]
    list_filter = ["status"]
    raw_id_fields = ["candidate"]

    def has_change_permission(self, request, obj=None):
        return False  # evidence is final


admin.site.register(Generation, list_display=["run", "number", "started_at", "finished_at"])
admin.site.register(AgentRecord, list_display=["run", "name", "kind", "evaluations", "improvements", "paused", "boost"])
admin.site.register(ProposalFailure, list_display=["run", "agent", "generation", "created_at"])
admin.site.register(Insight, list_display=["workload", "target", "kind", "shape_set", "created_at"], list_filter=["kind", "workload"])
admin.site.register(Direction, list_display=["run", "kind", "state", "author", "created_at", "applied_at"], list_filter=["kind", "state"])
admin.site.register(Promotion, list_display=["workload", "target", "shape_set", "candidate", "active", "created_at"])
admin.site.register(AuditEvent, list_display=["at", "actor", "verb", "subject"])
