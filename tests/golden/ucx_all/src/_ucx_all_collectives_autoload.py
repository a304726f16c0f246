"""Makes ``init_process_group("ucx_all")`` work without ``import ucx_all_collectives``.

``import torch`` calls :func:`register` through this distribution's
``torch.backends`` entry point (PyTorch's device-backend autoload), while torch
itself is still being imported; ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns that
off. It only registers the name: the creator it registers imports
``ucx_all_collectives``, and with it the C++ extension, when the first process group of
the backend is created. So ``import torch`` stays as fast as without it, starts
no thread, and a build that does not match the torch in use fails there, with
the package's error, instead of breaking ``import torch``.

This is a module of its own, outside ``ucx_all_collectives``: loading an entry point
imports the package that holds it, and ``ucx_all_collectives/__init__.py`` loads the extension.
"""


def register() -> None:
    """Registers backend "ucx_all" with torch.distributed, loading nothing yet."""
    import torch.distributed as dist  # already imported by torch at this point

    if dist.is_available():
        dist.Backend.register_backend(
            "ucx_all", _create_backend, extended_api=True, devices=["cpu", "cuda"]
        )


def _create_backend(*args, **kwargs):
    """Imports ucx_all_collectives (which registers its own creator), then creates the backend."""
    import ucx_all_collectives

    return ucx_all_collectives._C.create_backend(*args, **kwargs)
