"""CI runs what the README tells a new user to run: the quick start's commands, verbatim."""

import os
import re
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def quick_start_commands():
    """The command lines of the README's Quick start (bash blocks, comments left out)."""
    readme = open(os.path.join(REPO, 'README.md'), encoding='utf-8').read()
    section = readme.split('## Quick start', 1)[1].split('\n## ', 1)[0]
    blocks = re.findall(r'```bash\n(.*?)```', section, re.S)
    return [line for block in blocks for line in block.splitlines() if line and not line.startswith('#')]


def readme_command(which):
    out = subprocess.run(['bash', os.path.join(REPO, '.ci', 'readme_command.sh'), which],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.rstrip('\n')


def test_the_quick_start_has_exactly_two_commands_and_the_script_finds_each():
    commands = quick_start_commands()
    assert len(commands) == 2, commands
    assert readme_command('example') == commands[0]
    assert readme_command('test') == commands[1]
    assert commands[1].endswith('python -m pytest -q tests'), commands[1]


def test_an_unknown_command_name_is_refused():
    out = subprocess.run(['bash', os.path.join(REPO, '.ci', 'readme_command.sh'), 'deploy'],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and 'usage' in out.stderr


def test_ci_runs_the_readme_test_command_in_a_fresh_venv():
    script = open(os.path.join(REPO, '.ci', 'run'), encoding='utf-8').read()
    code = [line for line in script.splitlines() if not line.lstrip().startswith('#')]
    assert any('readme_command.sh test' in line for line in code)
    assert any(re.search(r'-m venv "\$VENV_PARENT/venv"', line) for line in code)
    assert any('eval "$TEST_COMMAND"' in line for line in code)
    assert not any('--system-site-packages' in line for line in code)
