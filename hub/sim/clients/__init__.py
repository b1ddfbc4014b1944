"""Hub clients: serving instances (scheduler + cluster) driven by the coordinator."""
