"""Validate the answers before cookiecutter writes the project.

new-backend validates before it calls cookiecutter; this hook is the same check
for people who run plain ``cookiecutter template/`` or ``cruft create``. The
template folder comes from the template's own Jinja extension (cruft renders
without cookiecutter's ``_repo_dir``).
"""

import sys

sys.path.insert(0, {{ new_backend_template_dir | tojson }})

from local_extensions import import_new_backend  # noqa: E402

validate = import_new_backend("new_backend.validate")
exceptions = import_new_backend("new_backend.exceptions")

try:
    validate.Answers.checked(
        backend_name={{ cookiecutter.backend_name | tojson }},
        ops={{ cookiecutter.ops | tojson }},
        devices={{ cookiecutter.devices | tojson }},
        impl={{ cookiecutter.impl | tojson }},
    )
except exceptions.InvalidAnswerError as e:
    sys.exit(f"new-backend: {e}")
