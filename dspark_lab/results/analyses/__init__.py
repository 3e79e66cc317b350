"""Analyses, one a module, each taking rows or the data object (never the facade): the platform card
(its copies; its waits and launches, card_primitives; its host, card_host), the advice, the hazards,
the EP-N prediction, the step model, sync cost, step diffs, profile checks."""
