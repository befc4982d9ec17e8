"""The project's own error type: a user mistake, reported as one line, exit 2."""

from sparktrain.core.textout import printable  # noqa: F401  (errors quote user text)


MAX_MESSAGE = 1000  # characters: a message quoting a 900,000-character value is cut


class SparkError(Exception):
    """A user-facing error. str(err) is the whole one-line message, at most
    MAX_MESSAGE characters (the middle of a longer one becomes "...")."""

    def __init__(self, message="", *rest):
        text = str(message)
        if len(text) > MAX_MESSAGE:
            text = f"{text[:MAX_MESSAGE * 3 // 4]}...{text[-(MAX_MESSAGE // 4 - 3):]}"
        super().__init__(text, *rest)


class BytecodeError(SparkError):
    """Malformed SPARK_BC bytes; the message names the byte offset."""

    def __init__(self, message: str, offset: int):
        super().__init__(f"{message} (at byte offset {offset})")
        self.offset = offset


class SourceError(SparkError):
    """A .spark source mistake; the message names line:col."""

    def __init__(self, message: str, filename: str, line: int, col: int):
        super().__init__(f"{filename}:{line}:{col}: {message}")
        self.line = line
        self.col = col


class TrainingFailed(SparkError):
    """Training ran but must not be claimed (loss did not fall, NaN): exit 1, not 2."""

    exit_code = 1
