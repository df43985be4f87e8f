"""The web console (`jobfence console`): `server` (routes, actions, CSRF) and `pages` (HTML)."""
