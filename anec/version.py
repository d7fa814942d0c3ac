"""The version of anec: one string, read by the package root, the artifact and pipeline
manifests, the output index and ``anec doctor``."""

__version__ = "0.1.0"
