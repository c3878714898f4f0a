"""A run's conditions, each read from the objects of the run."""
