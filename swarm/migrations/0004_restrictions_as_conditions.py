"""Restrictions must be conditions now (kernels.restrictions): a stored one that is an
arithmetic expression, taken by its truthiness before (``"BLOCK % 32"``), is rewritten to the
condition with the same meaning (``"(BLOCK % 32) != 0"``), so stored goals and runs still load.
Self-contained on purpose: a migration must not change when the library does."""

import ast

from django.db import migrations


def _is_condition(node: ast.AST) -> bool:
    match node:
        case ast.Compare() | ast.Name():
            return True
        case ast.Constant(value=value):
            return isinstance(value, bool)
        case ast.UnaryOp(op=ast.Not(), operand=operand):
            return _is_condition(operand)
        case ast.BoolOp(values=values):
            return all(_is_condition(v) for v in values)
    return False


def as_condition(text):
    """``text`` if it is a condition (or not an expression at all), else ``(text) != 0``:
    for a number x, bool(x) == (x != 0)."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, AttributeError, RecursionError):
        return text
    return text if _is_condition(tree) else f"({text.strip()}) != 0"


def rewrite(space):
    """``space`` (a design-space dict) with its restrictions as conditions; None if unchanged."""
    if not isinstance(space, dict) or not isinstance(space.get("restrictions"), list):
        return None
    new = [as_condition(r) if isinstance(r, str) else r for r in space["restrictions"]]
    return None if new == space["restrictions"] else {**space, "restrictions": new}


def forwards(apps, schema_editor):
    for model in ("Goal", "Run"):
        for row in apps.get_model("swarm", model).objects.only("pk", "space").iterator():
            space = rewrite(row.space)
            if space is not None:
                row.space = space
                row.save(update_fields=["space"])


class Migration(migrations.Migration):

    dependencies = [
        ("swarm", "0003_evidence_static"),
    ]

    operations = [
        migrations.RunPython(forwards, migrations.RunPython.noop),
    ]
