# SPDX-License-Identifier: MIT
"""_version.py - the version of the sema Python client (pyproject.toml reads it)."""
__version__ = "0.1.0"
