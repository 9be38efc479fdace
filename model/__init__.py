"""realm.model."""
