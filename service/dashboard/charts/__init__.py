"""Server-rendered SVG charts (no script, no external resources)."""
