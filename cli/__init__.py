"""realm.cli."""
