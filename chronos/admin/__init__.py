"""The admin API (HTTP), its parameters, its OpenAPI document and the ``chronos admin`` CLI."""
