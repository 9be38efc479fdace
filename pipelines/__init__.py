"""realm.pipelines."""
