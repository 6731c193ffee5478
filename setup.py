"""Package discovery: every package under registry/ and ladd_plugins/, plus configs/ installed as ladd_configs."""
from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["registry", "registry.*", "ladd_plugins", "ladd_plugins.*"]), "ladd_configs"])
