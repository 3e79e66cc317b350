"""Numbers that survive a hostile check: known idle, the guard, and the reference point under
pinned host interference (hostile_check). The run files and summaries here are kept out of data/ so
that they never become a machine's newest reference runs; load them with
Runs.load("studies/interference")."""
