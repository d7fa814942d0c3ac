"""anec: an ahead-of-time optimizing compiler toolchain for the Apple Neural Engine."""

__version__ = "0.1.0"
