"""The reference point in three separate adaptive runs, live updates through LiveBackend, and the
per-trial diagnostics' cost (stages; --smoke on CPU)."""
