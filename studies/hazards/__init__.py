"""The race check over lint's fixes, each applied to its gallery case."""
