"""Clients for agent developers: ``countersign_client.py`` is the typed Python client of
the agent API, one file that imports nothing of Countersign (only httpx), to copy into an
agent's project. The product never imports it."""
