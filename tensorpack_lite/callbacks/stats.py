"""Callbacks for people watching a run: open a shell into it on request
(:class:`InjectShell`), or send statistics out through a shell command (:class:`SendStat`)."""

import os
import string
import subprocess
import sys

from ..loop.callback import Callback
from ..utils import logger
from .stat_reader import StatReader

__all__ = ['InjectShell', 'SendStat']


def _stdin_is_a_terminal():
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (AttributeError, ValueError):   # replaced by an object without isatty, or closed
        return False


class InjectShell(Callback):
    """Pause training in an interactive shell when a file exists at the end of an epoch.

    Create the file to ask for a shell; it opens at the next :meth:`trigger` (by default the
    end of the epoch). In the shell, ``self`` is this callback and ``trainer`` the trainer;
    leave the shell to resume training. Without a terminal on stdin (e.g. a batch job, CI) no
    shell is opened: a warning names the file and training goes on. The file is removed when
    training ends.

    Example::

        callbacks=[InjectShell('/tmp/pause-training.tmp', shell='pdb')]
        # then, from another terminal: touch /tmp/pause-training.tmp
    """

    def __init__(self, file='INJECT_SHELL.tmp', shell='ipython'):
        """
        Args:
            file (str): the file whose existence asks for a shell.
            shell (str): 'ipython' (falls back to Python's ``code.interact`` when IPython is
                not installed) or 'pdb'.
        """
        if not isinstance(file, str) or not file:
            raise TypeError("InjectShell: file must be a non-empty path, got {!r}".format(file))
        if shell not in ('ipython', 'pdb'):
            raise ValueError("InjectShell: shell must be 'ipython' or 'pdb', got {!r}".format(shell))
        self._file = file
        self._shell = shell
        logger.info("InjectShell: create the file '{}' to open a {} shell at the end of an "
                    "epoch.".format(file, shell))

    def _trigger(self):
        if not os.path.isfile(self._file):
            return
        if not _stdin_is_a_terminal():
            logger.warn("InjectShell: file '{}' exists but stdin is not a terminal, so no shell is "
                        "opened; training goes on.".format(self._file))
            return
        logger.info("InjectShell: file '{}' exists, opening a {} shell.".format(
            self._file, self._shell))
        self._inject()

    def _inject(self):
        trainer = self.trainer  # noqa: F841 (for the user, in the shell)
        if self._shell == 'pdb':
            import pdb
            pdb.set_trace()
            return
        try:
            import IPython
        except ImportError:
            import code
            logger.warn("InjectShell: IPython is not installed; opening a plain Python shell.")
            code.interact(local={'self': self, 'trainer': trainer})
            return
        IPython.embed(user_ns={'self': self, 'trainer': trainer})

    def _after_train(self):
        if os.path.isfile(self._file):
            os.unlink(self._file)
            logger.info("InjectShell: removed '{}'.".format(self._file))


class SendStat(Callback):
    """At every :meth:`trigger` (by default the end of an epoch), run a shell command with
    the latest values of some statistics substituted in: ``command.format(**values)``.

    The values are the latest put into ``trainer.monitors``, read through :class:`StatReader`:
    put this callback after those that produce them. A name that no callback puts fails before
    the first step, and a statistic still never put at a trigger is an error naming it; a
    failing command is logged with its return code and training goes on.

    Example::

        SendStat('curl -s "https://example.com/notify?err={val-error:.3f}"', ['val-error'])
    """

    def __init__(self, command, names):
        """
        Args:
            command (str): a shell command with ``{name}`` placeholders (format syntax).
            names (str or list[str]): the statistics to substitute.
        """
        if not isinstance(command, str) or not command:
            raise TypeError("SendStat: command must be a non-empty str, got {!r}".format(command))
        if isinstance(names, str):
            names = [names]
        if not isinstance(names, (list, tuple)) or not names or \
                not all(isinstance(n, str) and n for n in names):
            raise TypeError("SendStat: names must be a statistic name or a non-empty list of "
                            "them, got {!r}".format(names))
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(command) if f is not None]
        except ValueError as err:
            raise ValueError("SendStat: command {!r} is not a valid format string: {}".format(
                command, err)) from err
        unknown = sorted({f.split('.')[0].split('[')[0] for f in fields} - set(names))
        if unknown:
            raise ValueError("SendStat: command {!r} uses {} which are not in names={}; positional "
                             "fields ('{{}}') are not supported either.".format(
                                 command, unknown, list(names)))
        self.command = command
        self.names = list(names)
        self._stats = [StatReader(self, name) for name in self.names]
        self.last_returncode = None
        """The return code of the latest command run."""

    def _before_epoch(self):
        for stat in self._stats:   # before the first step, once every callback is ready
            stat.check_once()

    def _trigger(self):
        values = {stat.name: stat.latest()[1] for stat in self._stats}
        cmd = self.command.format(**values)
        self.last_returncode = subprocess.run(cmd, shell=True).returncode
        if self.last_returncode != 0:
            logger.error("SendStat: command '{}' failed with return code {}.".format(
                cmd, self.last_returncode))
