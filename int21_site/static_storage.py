"""Storage of the collected static files (SERVESTATIC_USE_FINDERS=0): content-hashed names,
gzip copies, and the relative imports of JavaScript modules rewritten to the hashed names."""

from servestatic.storage import CompressedManifestStaticFilesStorage


class ManifestStorage(CompressedManifestStaticFilesStorage):
    """ServeStatic's compressed manifest storage that also rewrites ``import ... from "./x.js"``
    and ``export ... from "./x.js"`` in ``.js`` files to ``./x.<hash>.js`` (Django's
    ``support_js_module_import_aggregation``), so that the run page's ES modules load under
    their hashed names."""

    support_js_module_import_aggregation = True
