"""Packaging of tensorpack_lite: the metadata, dependencies and extras are in pyproject.toml.

This file remains for tools and habits that call ``python setup.py ...`` directly.
"""

from setuptools import setup

setup()
