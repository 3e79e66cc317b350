"""Reading run files with every record validated (load), through a derived columnar cache (cache)."""
