"""The platform card and the hazard counts measured on one GPU, with the notebooks' sections run
live (card_and_hazards); the records land in data/machines/, where the kit reads them."""
