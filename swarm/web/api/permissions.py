"""Who may do what through the API: the same roles as the pages.

Reading needs a signed-in user (session or token) of any role; writing needs the role's
permission, named per view action in ``required_perms`` (e.g. ``{"create": ["swarm.add_goal"]}``).
An unsafe action a view does not list is refused.
"""

from __future__ import annotations

from rest_framework.permissions import SAFE_METHODS, BasePermission


class RolePermission(BasePermission):
    message = "your role does not allow this"

    def has_permission(self, request, view) -> bool:
        user = request.user
        if not (user and user.is_authenticated):
            return False
        if request.method in SAFE_METHODS:
            return True
        required = getattr(view, "required_perms", {})
        action = getattr(view, "action", None) or request.method.lower()
        perms = required.get(action)
        if perms is None:
            return False
        missing = [p for p in perms if not user.has_perm(p)]
        if missing:
            self.message = f"{user.get_username()} lacks the {', '.join(p.split('.', 1)[1] for p in missing)} permission"
            return False
        return True
