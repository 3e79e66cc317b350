"""Facts the whole house reads, one table each: the strategies (strategy_table) and run kinds (run_kinds).
stdlib only: the torch wings register against these tables, the views colour and order by them."""
