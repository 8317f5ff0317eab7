"""Stand-in record types (see the package docstring)."""
