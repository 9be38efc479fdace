"""realm.flows."""
