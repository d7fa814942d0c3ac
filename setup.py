"""Only the cffi extension lives here; all metadata is in pyproject.toml."""

from setuptools import setup

setup(cffi_modules=["anec/runtime/_ffi_build.py:ffibuilder"])
