"""The end-to-end tier's fixtures: nodes as real ``chronos run`` processes."""

from tests.e2e.test_cli_e2e import run_node

__all__ = ["run_node"]
