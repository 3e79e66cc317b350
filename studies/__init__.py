"""Studies by topic: each a script (`python -m studies.<topic>.<script> --help`) beside the data it
recorded. Studies may import dspark_lab; dspark_lab never imports a study (pyproject.toml's contracts)."""
