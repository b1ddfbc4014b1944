"""The scenario config: pydantic models, presets, bounds, safe YAML, and their resolution onto the wire."""
