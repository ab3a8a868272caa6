"""What the library's logger logs, collected (the logger does not propagate to the root, so
pytest's caplog does not see it): :func:`capture_logs` gives a :class:`LogRecords`; the
``log_records`` fixture of tests/conftest.py is it for a whole test."""

import contextlib
import logging

__all__ = ['LogRecords', 'capture_logs']


class LogRecords(list):
    """The ``logging.LogRecord`` s of a logger, in the order they were logged."""

    def messages(self, level=logging.NOTSET):
        """The messages of the records at ``level`` or above."""
        return [r.getMessage() for r in self if r.levelno >= level]

    def messages_at(self, level):
        """The messages of the records at exactly ``level``."""
        return [r.getMessage() for r in self if r.levelno == level]


class _Collect(logging.Handler):
    def __init__(self, records):
        super().__init__()
        self.records = records

    def emit(self, record):
        self.records.append(record)


@contextlib.contextmanager
def capture_logs(name='tensorpack_lite'):
    """Collects what the logger ``name`` logs inside the block, as a :class:`LogRecords`.

    The library's logger does not propagate to the root, so pytest's caplog does not see it.

    Example::

        with capture_logs() as records:
            do_something()
        assert 'done' in records.messages(logging.INFO)
    """
    records = LogRecords()
    handler = _Collect(records)
    lg = logging.getLogger(name)
    lg.addHandler(handler)
    try:
        yield records
    finally:
        lg.removeHandler(handler)
