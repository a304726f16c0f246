"""Every error the generator raises on purpose. The CLI turns each into one line."""


class NewBackendError(Exception):
    """Base class: a known problem with the user's input or environment."""

    exit_code = 1


class InvalidAnswerError(NewBackendError):
    """A backend name, op list, device list or implementation that cannot be used."""

    exit_code = 2

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"invalid {field}: {message}")
        self.field = field
        self.reason = message


class TargetExistsError(NewBackendError):
    """The output folder already exists and --force was not given (bad input: exit 2)."""

    exit_code = 2


class OutputDirError(NewBackendError):
    """The output directory cannot hold the project (not a folder, not writable)."""

    exit_code = 2


class AnswersFileError(NewBackendError):
    """A --from-answers file that cannot be read or is not a new-backend answers file."""

    exit_code = 2


class TemplateError(NewBackendError):
    """Rendering the template failed; nothing was written to the target."""


class NotAProjectError(NewBackendError):
    """``update`` or ``check`` was pointed at a folder that is not a generated project."""

    exit_code = 2


class DirtyProjectError(NewBackendError):
    """``update`` refuses a git project with uncommitted changes (unless --allow-dirty)."""

    exit_code = 2


class BaseUnavailableError(NewBackendError):
    """The render a project was made from cannot be reproduced by this generator."""


class ConflictError(NewBackendError):
    """``update`` left conflict markers in some files: the user must resolve them."""


class WriteError(NewBackendError):
    """The file system refused to take the rendered project (a full disk, a quota)."""
