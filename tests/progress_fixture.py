"""A clock a test moves by hand and a stream that says whether it is a terminal, for the
progress lines (`realm.model.progress`) of the model's and the pipelines' tests."""

import io


class Clock:
    def __init__(self, now: float = 0.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


class Stream(io.StringIO):
    def __init__(self, terminal: bool):
        super().__init__()
        self.terminal = terminal

    def isatty(self) -> bool:
        return self.terminal
