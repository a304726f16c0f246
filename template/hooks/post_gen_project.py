"""Remove the files the chosen implementation does not use.

Every file of the template is rendered for every project; the few that belong
to one implementation only are deleted here, from the freshly generated folder.
"""

from pathlib import Path

IMPL = {{ cookiecutter.impl | tojson }}

ONLY_FOR = {
    "store": ["csrc/store_exchange.hpp", "csrc/store_exchange.cpp"],
}

for impl, paths in ONLY_FOR.items():
    if impl != IMPL:
        for path in paths:
            Path(path).unlink()
