"""The order of a run (tests/README.md, "Running it"): with pytest-randomly (in the ``test`` extra)
the files, and the tests in each file, run in a random order drawn from a seed; without it (or with
``-p no:randomly``) in their order on disk.

A pytest plugin (tests/conftest.py loads it). The run says its seed when it starts, even under
``-q`` (pytest-randomly's own line is in the header, which ``-q`` hides). At its end, after a
failure, it prints for each pytest-xdist worker that failed the command that runs the files that
worker ran, up to its last failure, again in the same order in one process: the seed orders any
set of files as it ordered them in the whole run (pytest-randomly sorts files, and tests in a file,
by a hash of the seed and their name), and reseeds ``random`` and numpy before each test from the
seed and the test's name.
"""

__all__ = ['seed_of']

PLUGIN = 'randomly'


def seed_of(config):
    """The run's pytest-randomly seed, or None when the order is not random."""
    if not config.pluginmanager.hasplugin(PLUGIN) or not config.getoption('randomly_reorganize', False):
        return None
    seed = config.getoption('randomly_seed', None)
    return seed if isinstance(seed, int) else None


def rerun_command(config, seed, files):
    """The command that runs ``files`` in the order ``seed`` gives them, in one process."""
    command = ['python', '-m', 'pytest', '-q', '-p', PLUGIN, '-p', 'no:cacheprovider',
               '--randomly-seed={}'.format(seed)]
    if not config.getoption('randomly_reset_seed', True):
        command.append('--randomly-dont-reset-seed')
    for option, flag in (('markexpr', '-m'), ('keyword', '-k')):
        value = config.getoption(option, '')
        if value:
            command += [flag, "'{}'".format(value.replace("'", "'\\''"))]
    return ' '.join(command + list(files))


class RunOrder:
    """In the process that reports (pytest-xdist's controller, or the only one): the seed at the
    start; which files each worker ran, in order, and where its last failure was."""

    def __init__(self, config):
        self.config = config
        self.files = {}          # worker ('gw0'..., or None without xdist) -> files in the order run
        self.failed = {}         # worker -> how many of its files, up to the last with a failure

    def say(self, line):
        reporter = self.config.pluginmanager.get_plugin('terminalreporter')
        if reporter is not None:
            reporter.write_line(line)

    def pytest_sessionstart(self, session):
        seed = seed_of(self.config)
        if seed is None:
            self.say('[order] the tests run in their order on disk (pytest-randomly is not installed, or '
                     '-p no:randomly)')
        else:
            self.say('[order] random order, --randomly-seed={0}: add -p randomly --randomly-seed={0} to a '
                     'command to run its tests in the same order'.format(seed))

    def pytest_runtest_logreport(self, report):
        gateway = getattr(getattr(report, 'node', None), 'gateway', None)
        worker = getattr(gateway, 'id', None)
        files = self.files.setdefault(worker, [])
        path = report.nodeid.split('::')[0]
        if path not in files:
            files.append(path)
        if report.failed:
            self.failed[worker] = files.index(path) + 1

    def pytest_terminal_summary(self, terminalreporter):
        seed = seed_of(self.config)
        if seed is None or not self.failed:
            return
        for worker in sorted(self.failed, key=str):
            files = self.files[worker][:self.failed[worker]]
            who = 'worker ' + worker if worker else 'the run'
            terminalreporter.write_line('[order] {} ran {} file(s) up to its last failure; again, in that '
                                        'order, in one process:'.format(who, len(files)))
            terminalreporter.write_line('    ' + rerun_command(self.config, seed, files))


def pytest_configure(config):
    if not hasattr(config, 'workerinput'):
        config.pluginmanager.register(RunOrder(config), 'run_order_reporter')
