"""Putting parts together: the plugin registry and its hooks, the catalog, configuration, options, model paths."""
