"""Test configuration: fixtures live in plugins so each suite can see what it depends on."""

pytest_plugins = ["tests.fixtures"]
