"""Helpers shared by the test folders: importable as ``support.<name>`` (pyproject's pytest ``pythonpath``).

tests/README.md lists what each module holds; ``support/scripts/`` holds the programs tests run as child processes.
"""
