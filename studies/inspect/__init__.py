"""`dspark-lab inspect` and `diff` on the gallery's cases and every kata graded, on a GPU
(katas_and_diffs); the records land in data/inspect/, the summary here."""
