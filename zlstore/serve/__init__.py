"""Serving a store in datasette: the plugin, the site's metadata and the server."""
