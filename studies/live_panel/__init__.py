"""How fast the live panel keeps up (benchmark), and where a cold first figure's and a live
update's time goes (cold_start, where_time_goes). The benchmark's records land in data/machines/."""
