"""Jinja helpers for the new-backend template, loaded by cookiecutter (``_extensions``).

Templates call ``project()`` to get a :class:`new_backend.project.Project`: the
validated answers and every name derived from them, plus the catalogue of ops.
``template_hash`` is the content hash of this template and the generator code
it renders with (recorded in ``.new-backend.json``, it lets ``new-backend
update`` rebuild the project's base); ``new_backend_template_dir`` is this
folder, for the hooks.
The generator package is imported from the installed ``new_backend`` or, in a
checkout, from ``../generator`` next to this folder.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

from jinja2 import pass_context
from jinja2.ext import Extension


def import_new_backend(module: str = "new_backend") -> ModuleType:
    """Import a module of the generator, from the installation or the checkout."""
    try:
        return importlib.import_module(module)
    except ImportError:
        checkout = Path(__file__).resolve().parent.parent / "generator"
        if str(checkout) not in sys.path:
            sys.path.insert(0, str(checkout))
        return importlib.import_module(module)


class NewBackendExtension(Extension):
    """Adds the ``project()`` global to the template environment."""

    def __init__(self, environment):
        super().__init__(environment)
        project_module = import_new_backend("new_backend.project")
        kits = import_new_backend("new_backend.kits")
        here = Path(__file__).resolve().parent
        cache: dict[tuple, object] = {}

        @pass_context
        def project(context):
            answers = context["cookiecutter"]
            key = tuple(answers[k] for k in ("backend_name", "ops", "devices", "impl"))
            if key not in cache:
                cache[key] = project_module.Project.from_context(answers)
            return cache[key]

        environment.globals["project"] = project
        environment.globals["new_backend_template_dir"] = str(here)
        environment.globals["template_hash"] = kits.kit_hash(
            here, Path(project_module.__file__).parent
        )
