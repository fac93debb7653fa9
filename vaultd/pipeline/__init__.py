"""The indexing stages, from finding notes to storing vectors; siblings never import each other."""
