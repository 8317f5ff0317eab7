"""Stand-in graders package (see the package docstring)."""
