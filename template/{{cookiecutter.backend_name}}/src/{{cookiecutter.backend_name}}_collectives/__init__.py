{%- set p = project() -%}
"""The "{{ p.name }}" backend for torch.distributed.

Importing this package registers the backend::

    import torch.distributed as dist
    import {{ p.package }}  # noqa: F401

    dist.init_process_group("{{ p.name }}", rank=rank, world_size=world_size)
"""

import torch  # noqa: F401  (loads libtorch before the extension)
import torch.distributed as dist

from . import _C

__version__ = "0.1.0"

#: The name to pass to ``torch.distributed.init_process_group``.
BACKEND_NAME = "{{ p.name }}"
#: The devices the backend is registered for.
DEVICES = [{% for d in p.devices %}"{{ d }}"{{ ", " if not loop.last }}{% endfor %}]
#: The collectives the backend implements; every other one raises a RuntimeError.
OPS = [
{%- for op in p.ops %}
    "{{ op.name }}",
{%- endfor %}
]
#: Whether this build handles CUDA tensors.
WITH_CUDA = _C.WITH_CUDA

dist.Backend.register_backend(
    BACKEND_NAME, _C.create_backend, extended_api=True, devices=DEVICES
)
