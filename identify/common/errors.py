"""Errors the command line maps to exit codes (identify.app.cli): bad input (2) and a backend's
safety refusal (4). Kept below the stages so that any stage can raise them."""


class InputError(ValueError):
    """Bad user input other than the scenario file (exit code 2)."""


class SafetyRefusal(RuntimeError):
    """The backend refused to move the arm (limits, not armed, ...). CLI exit code 4."""

    safety_refusal = True
