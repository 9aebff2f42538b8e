from django.contrib import admin

from swarm.models import AuditEvent, Candidate, Evidence, Goal, Promotion, Run

admin.site.register(Goal, list_display=["name", "workload", "target", "shape_set", "created_at"])
admin.site.register(Run, list_display=["id", "goal", "state", "budget", "generation", "started_at"])
admin.site.register(Candidate, list_display=["id", "run", "generation", "agent", "status"], list_filter=["status"])
admin.site.register(Evidence, list_display=["candidate", "status", "duration_s"])
admin.site.register(Promotion, list_display=["workload", "target", "shape_set", "candidate", "active", "created_at"])
admin.site.register(AuditEvent, list_display=["at", "actor", "verb", "subject"])
