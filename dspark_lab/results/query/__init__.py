"""Questions over loaded runs: the data object (RunData: rows, headers, labels, kinds, verdicts), the
run list (catalog), what each run is (kinds), the headline, and the `Runs` facade over them."""
