"""Where things are: the tests/ directory and the repository's root."""

import os

__all__ = ['TESTS_DIR', 'REPO_DIR']

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
"""The tests/ directory (its *_scripts/ folders hold the programs the tests start)."""
REPO_DIR = os.path.dirname(TESTS_DIR)
"""The repository's root."""
