"""Running the code of a guide (docs/*.md) as written: its ```python blocks in order in one
process, a block whose first line is ``# file: NAME`` written to that file instead, then the
``$ `` lines of its ```console blocks in order, in one directory. Used by the tests of the
guides, so that a guide's code cannot drift from what works."""

import os
import re
import sys

from helpers.processes import run_bounded

BLOCK = re.compile(r'^```(python|console)\n(.*?)^```', re.M | re.S)


def blocks(path):
    """[(language, text)] of the guide's python and console blocks, in order."""
    with open(path, encoding='utf-8') as f:
        return BLOCK.findall(f.read())


def run_guide(path, workdir, timeout, env=None, shell_env=None):
    """Run the guide's code in ``workdir``; returns the output of everything it ran, in order.
    A failing step fails the test with its output. ``shell_env``: the environment of the
    ``$`` commands (default ``env``)."""
    script, commands = [], []
    for language, text in blocks(path):
        if language == 'console':
            commands += [line[2:] for line in text.splitlines() if line.startswith('$ ')]
            continue
        first = text.splitlines()[0] if text.strip() else ''
        name = re.match(r'# file: (\S+)$', first)
        if name:
            with open(os.path.join(workdir, name.group(1)), 'w', encoding='utf-8') as f:
                f.write(text)
        else:
            script.append(text)
    with open(os.path.join(workdir, 'guide_main.py'), 'w', encoding='utf-8') as f:
        f.write('\n'.join(script))
    outputs = []
    code, output = run_bounded([sys.executable, 'guide_main.py'], timeout, env=env, cwd=workdir)
    assert code == 0, "the Python blocks of {} failed:\n{}".format(path, output[-6000:])
    outputs.append(output)
    for command in commands:
        argv = command.split()
        if argv[0] == 'python':
            argv[0] = sys.executable
        elif os.path.exists(os.path.join(os.path.dirname(sys.executable), argv[0])):
            argv[0] = os.path.join(os.path.dirname(sys.executable), argv[0])
        code, output = run_bounded(argv, timeout, env=shell_env or env, cwd=workdir)
        assert code == 0, "`{}` of {} failed:\n{}".format(command, path, output[-6000:])
        outputs.append(output)
    return '\n'.join(outputs)


def without_package(tmp_path, env):
    """``env`` in which ``import tensorpack_lite`` fails (a package of that name that refuses
    first on the path)."""
    blocker = tmp_path / 'blocker' / 'tensorpack_lite'
    blocker.mkdir(parents=True)
    (blocker / '__init__.py').write_text("raise ImportError('tensorpack_lite is not importable here')\n")
    return dict(env, PYTHONPATH=str(blocker.parent))
